#!/usr/bin/python3
"""Writes docs/api/: one page per public header (the headers //:public_headers lists, which
tools/install.sh installs) and an index, from the headers themselves, so a page never
says something its header does not.

  /usr/bin/python3 docs/api/make_api_pages.py            # rewrite docs/api/*.md
  /usr/bin/python3 docs/api/make_api_pages.py --check    # exit 1 if a page is out of date

A page is the header's opening comment (what the unit is for, its contract and example;
comment lines indented by two or more spaces become code blocks) followed by the names it
declares at namespace level, each with the first sentence of the comment above it.
tests/docs/docs_in_sync_test runs --check.
"""
import argparse
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "docs", "api")


def public_headers():
    """The header labels of PUBLIC_HEADERS in the root BUILD.bazel, as paths."""
    with open(os.path.join(REPO, "BUILD.bazel")) as f:
        build = f.read()
    block = re.search(r"PUBLIC_HEADERS = \[(.*?)\]", build, re.S).group(1)
    return sorted(f"{pkg}/{name}" for pkg, name in re.findall(r'"//([\w/]+):([\w.]+\.h)"', block))


def page_name(header):
    return header.replace("/", "_").replace(".h", "") + ".md"


def opening_comment(lines):
    comment = []
    for line in lines:
        if not line.startswith("//"):
            break
        comment.append(line[2:][1:] if line.startswith("// ") else line[2:])
    return comment


def comment_to_markdown(comment):
    """Comment lines to Markdown. Lines indented by 2+ spaces become a code block when they
    follow a blank line, a line ending in ':' or another code line; indented lines under a
    "- " item continue the item."""
    out, code = [], []
    item_indent = None  # the continuation indent of the list item being read, if any

    def flush():
        if code:
            while code and not code[-1].strip():
                code.pop()
            out.append("```")
            out.extend(code)
            out.append("```")
            code.clear()

    for line in comment:
        indent = len(line) - len(line.lstrip(" "))
        item = re.match(r"^\s*- ", line)
        if not line.strip():
            if code:
                code.append(line)
            else:
                out.append(line)
            item_indent = None
        elif item and not code:
            out.append(line)
            item_indent = len(item.group(0))
        elif item_indent is not None and indent >= 2 and not code:
            out.append(" " * item_indent + line.strip())  # the item goes on
        elif indent >= 2 and (code or not out or not out[-1].strip()
                              or out[-1].rstrip().endswith(":")):
            code.append(line)
        else:
            flush()
            out.append(line)
            item_indent = None
    flush()
    return out


DECLARATION = re.compile(
    r"^(?:template <[^>]*> )?(?:class|struct|enum class|enum) (\w+)[^;]*$"  # a type
    r"|^using (\w+) ="                                                     # an alias
    r"|^(?!using |namespace |return |#|}|//)[A-Za-z][\w:<>,*& ]*?[\s*&](\w+)\(")  # a function


def declarations(lines):
    """(name, first comment line above it) of each namespace-level declaration."""
    found, seen = [], set()
    for i, line in enumerate(lines):
        m = DECLARATION.match(line)
        if not m:
            continue
        name = next(g for g in m.groups() if g)
        if name in seen or name.startswith("FUSELAGE_"):
            continue
        seen.add(name)
        j = i - 1
        while j >= 0 and lines[j].startswith("//"):
            j -= 1
        comment = " ".join(l[2:].strip() for l in lines[j + 1:i])
        # Its first sentence: up to the first ". " (or the whole comment).
        above = re.split(r"(?<=\.)\s", comment, maxsplit=1)[0] if comment else ""
        found.append((name, above))
    return found


def render(header):
    with open(os.path.join(REPO, header)) as f:
        lines = f.read().splitlines()
    body = comment_to_markdown(opening_comment(lines))
    out = [f"# `{header}`", "", f'`#include "{header}"` · source: [{header}](../../{header})', ""]
    out += body
    decls = declarations(lines)
    if decls:
        out += ["", "## Declared here", ""]
        for name, above in decls:
            out.append(f"- `{name}`" + (f": {above}" if above else ""))
    out += ["", "---", "Generated from the header by docs/api/make_api_pages.py; edit the header, "
            "not this page.", ""]
    return "\n".join(out)


def index(headers):
    out = ["# The public C++ API", "",
           "One page per public header: the headers `bash tools/install.sh` installs under",
           "`PREFIX/include/fuselage` (build against them with",
           "`g++ my.cc $(pkg-config --cflags --libs fuselage)`). Start with",
           "[graph/graph_module.h](graph_graph_module.md), the model every pass works on.", ""]
    folder = None
    for header in headers:
        if header.split("/")[0] != folder:
            folder = header.split("/")[0]
            out += ["", f"## {folder}/", ""]
        with open(os.path.join(REPO, header)) as f:
            comment = opening_comment(f.read().splitlines())
        paragraph = " ".join(l.strip() for l in (comment + [""])[:comment.index("")
                                                                 if "" in comment else None])
        first = re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0]
        out.append(f"- [{header}]({page_name(header)})" + (f": {first}" if first else ""))
    out += ["", "---", "Generated by docs/api/make_api_pages.py.", ""]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare instead of writing; exit 1 naming the stale pages")
    parser.add_argument("headers", nargs="*",
                        help="the public headers (default: PUBLIC_HEADERS of BUILD.bazel); "
                             "anything but a .h, and generated .pb.h files, is skipped")
    args = parser.parse_args()
    headers = sorted(h for h in args.headers
                     if h.endswith(".h") and not h.endswith(".pb.h")) or public_headers()
    pages = {page_name(h): render(h) for h in headers}
    pages["README.md"] = index(headers)
    stale = []
    for name, text in sorted(pages.items()):
        path = os.path.join(OUT, name)
        old = open(path).read() if os.path.exists(path) else None
        if old == text:
            continue
        if args.check:
            stale.append(name)
        else:
            with open(path, "w") as f:
                f.write(text)
    extra = sorted(set(n for n in os.listdir(OUT) if n.endswith(".md")) - set(pages))
    if args.check:
        if stale or extra:
            print("docs/api is out of date: " + ", ".join(stale + [f"{e} (no header)" for e in extra])
                  + "; run /usr/bin/python3 docs/api/make_api_pages.py", file=sys.stderr)
            return 1
        print(f"docs/api: {len(pages)} pages up to date")
        return 0
    for name in extra:
        os.remove(os.path.join(OUT, name))
    print(f"docs/api: wrote {len(pages)} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
