"""The examples of README.md, the user guide (docs/guide/*.md) and the PT2E tutorial
(docs/tutorials/pt2e_pattern.md) run as tests (issues 39, 36).

Each example runs in a fresh temporary folder holding links to the checkout's folders (so
`tools/examples/residual.textproto` and `backend_configs/...` are where the pages say),
in a subprocess with python/ on PYTHONPATH and the CLI on PATH as `fuselage`:
  - a ```python block runs as a program;
  - a ```sh block that calls `fuselage` runs in bash, stopping at the first failing command
    (blocks that only call Bazel or the setup scripts, to build, install or benchmark,
    are not run: minutes each, and they change the machine);
  - a block after `<!-- output of: COMMAND -->` is not run: its lines must appear, in
    order, in COMMAND's output;
  - a block after `<!-- not run: REASON -->` is skipped with the reason.
A failure names the page and the line of the block's opening fence.
"""
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDE = os.path.join("docs", "guide")
PAGES = ["README.md"] + sorted(os.path.join(GUIDE, name)
                               for name in os.listdir(os.path.join(REPO, GUIDE))
                               if name.endswith(".md")) + \
    [os.path.join("docs", "tutorials", "pt2e_pattern.md")]  # the others are C++ tests

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!-- (not run|output of): (.*\S) -->$")
SHELLS = ("sh", "bash", "shell")
# A shell line that calls the CLI: `fuselage ...`, possibly after VAR=value assignments.
CALLS_CLI = re.compile(r"^\s*(\w+=\S*\s+)*fuselage(\s|$)", re.MULTILINE)
TIMEOUT_SECONDS = 300


@dataclass
class Block:
    page: str      # relative to the checkout
    line: int      # 1-based line of the opening fence
    lang: str
    code: str
    marker: tuple  # (kind, text) of the comment right before the fence, or None

    @property
    def where(self):
        return f"{self.page}:{self.line}"

    @property
    def runs(self):
        # Which blocks this test executes when they carry no marker.
        return self.lang == "python" or (self.lang in SHELLS and CALLS_CLI.search(self.code))


def blocks_of(page, text):
    """The fenced blocks of a page, with the marker comment (if any) on the last non-blank
    line before each."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        before = [l for l in lines[:start] if l.strip()]
        marked = MARKER.match(before[-1]) if before else None
        blocks.append(Block(page, start + 1, opening.group(1), "\n".join(body) + "\n",
                            marked.groups() if marked else None))
        i += 1
    return blocks


def all_blocks():
    found = []
    for page in PAGES:
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            found += blocks_of(page, f.read())
    return found


def checked(blocks):
    return [b for b in blocks if b.marker is not None or b.runs]


def workspace(tmp_path, cli):
    """(cwd, env) for one example: links to the checkout's top-level entries, and a bin
    folder with `fuselage` and a `python3` that is this test's Python (the pages say
    `python3` for any Python with torch)."""
    work, tools = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    tools.mkdir()
    for name in os.listdir(REPO):
        if not name.startswith((".", "bazel-")):
            os.symlink(os.path.join(REPO, name), work / name)
    wrapper = tools / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    if cli is not None:
        os.symlink(cli, tools / "fuselage")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"),
               PATH=f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")
    return work, env


def run(argv, cwd, env):
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_SECONDS)


def tail(text, lines=30):
    return "\n".join(text.splitlines()[-lines:])


def check_block(block, cwd, env):
    """Runs (or, with an `output of` marker, checks) one block; pytest.fail naming its
    place otherwise."""
    if block.marker and block.marker[0] == "output of":
        command = block.marker[1]
        result = run(["bash", "-c", command], cwd, env)
        if result.returncode != 0:
            pytest.fail(f"{block.where}: `{command}` exited {result.returncode}:\n"
                        f"{tail(result.stderr)}", pytrace=False)
        printed = iter(line.rstrip() for line in result.stdout.splitlines())
        for expected in (l.rstrip() for l in block.code.splitlines() if l.strip()):
            # `in` on an iterator consumes it: the lines must come in the block's order.
            if expected not in printed:
                pytest.fail(f"{block.where}: `{command}` does not print, in this order:\n"
                            f"{expected}\n--- it printed:\n{tail(result.stdout, 60)}",
                            pytrace=False)
        return
    script = cwd.parent / f"{block.page.replace(os.sep, '_')}_{block.line}.{block.lang}"
    script.write_text(block.code)
    argv = ([sys.executable, str(script)] if block.lang == "python"
            else ["bash", "-e", "-o", "pipefail", str(script)])
    result = run(argv, cwd, env)
    if result.returncode != 0:
        pytest.fail(f"{block.where}: the ```{block.lang} block exited {result.returncode} "
                    f"(line N of its script is line {block.line}+N of the page)\n"
                    f"--- stdout\n{tail(result.stdout)}\n--- stderr\n{tail(result.stderr)}",
                    pytrace=False)


@pytest.mark.parametrize("block", checked(all_blocks()), ids=lambda b: b.where)
def test_example(block, tmp_path, request):
    if block.marker and block.marker[0] == "not run":
        pytest.skip(f"{block.where}: not run: {block.marker[1]}")
    # Only the examples that call the CLI build it (conftest's fixture runs Bazel).
    uses_cli = block.lang in SHELLS or block.marker is not None
    cli = request.getfixturevalue("cli") if uses_cli else None
    cwd, env = workspace(tmp_path, cli)
    check_block(block, cwd, env)


def test_the_pages_have_examples_and_every_marker_means_something():
    blocks = all_blocks()
    by_page = {page: [b for b in blocks if b.page == page] for page in PAGES}
    # An extractor that finds nothing would pass every test above.
    for page in ["README.md", os.path.join(GUIDE, "python.md")]:
        assert any(b.lang == "python" and b.marker is None for b in by_page[page]), page
    assert any(b.lang == "sh" and b.runs for b in by_page[os.path.join(GUIDE, "cli.md")])
    for b in blocks:
        if b.marker and b.marker[0] == "not run":
            assert b.runs, f"{b.where}: `not run` on a block this test would not run anyway"


def test_a_failing_example_fails_naming_its_place(tmp_path):
    page = "page.md"
    text = ("# a page\n\n```python\nprint('fine')\n```\n\n```sh\nfalse\nfuselage help\n```\n\n"
            "<!-- output of: echo one; echo two -->\n```\ntwo\none\n```\n")
    python_block, sh_block, output_block = blocks_of(page, text)
    cwd, env = workspace(tmp_path, cli=None)
    check_block(python_block, cwd, env)  # passes
    with pytest.raises(pytest.fail.Exception, match=r"page\.md:7: the ```sh block exited 1"):
        check_block(sh_block, cwd, env)  # `false` stops it before `fuselage` is looked for
    with pytest.raises(pytest.fail.Exception, match=r"page\.md:13: .* in this order:\none"):
        check_block(output_block, cwd, env)
