"""bench/compare_pytorch.py on a tiny graph: it finds (or builds) its binaries from any
folder, prints the PyTorch / fuselage row, and leaves its temporary folder (TMPDIR,
which PyTorch's children inherit) exactly as it found it."""
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_runs_from_another_folder_and_leaves_tmp_as_it_was(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (scratch / "kept.txt").write_text("left alone")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    env.pop("PYTHONPATH", None)  # the script finds python/fuselage itself
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "compare_pytorch.py"), "--sizes", "100",
         "--stages", "match", "--repeats", "1", "--budget", "60"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    # The synthetic network of 100 nodes: a PyTorch time, a fuselage time, their ratio.
    assert re.search(r"^synthetic 100\s+match\s+100\s+[0-9.]+\s+[0-9.]+\s+[0-9,]+x$",
                     result.stdout, re.M), result.stdout
    assert sorted(p.name for p in scratch.iterdir()) == ["kept.txt"]
    assert list(elsewhere.iterdir()) == []
