"""`fuselage quantize --json`, progress on a terminal and `--quiet` (issue 23 item 2).

The JSON report is checked against the text report of the same run (both come from one
QuantizeFlowReport, but through different printers); progress is checked by giving the
tool a pseudo-terminal as stderr, as a user's shell would.
"""
import json
import os
import pty
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "tools", "examples", "residual.textproto")


def quantize(cli, tmp_path, *flags, stderr=subprocess.PIPE):
    return subprocess.run([cli, "quantize", MODEL, "--backend=qnnpack", "--samples=3",
                           "-o", str(tmp_path / "q.fsl"), *flags],
                          stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300)


def test_json_report_has_every_stage_with_the_text_reports_counts(cli, tmp_path):
    text = quantize(cli, tmp_path)
    assert text.returncode == 0, text.stderr
    as_json = quantize(cli, tmp_path, "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    stages = {s["name"]: s for s in report["stages"]}
    assert [s["name"] for s in report["stages"]] == ["fuse", "prepare", "calibrate", "convert",
                                                      "lower"]
    assert all(s["seconds"] >= 0 for s in report["stages"])

    def number(pattern):
        return int(re.search(pattern, text.stdout).group(1))

    assert stages["fuse"]["fused"] == number(r"fuse: (\d+) matches fused")
    assert stages["prepare"]["quantized_ops"] == number(r"prepare: (\d+) ops quantized")
    assert stages["prepare"]["observer_nodes"] == number(r"(\d+) observer nodes")
    assert stages["calibrate"]["samples"] == 3 == number(r"calibrate: (\d+) samples")
    assert stages["convert"]["observers_replaced"] == number(r"(\d+) observers replaced")
    lowered = sum(stages["lower"]["lowered_per_rule"].values())
    assert lowered == number(r"lower-to-native: (\d+) pattern\(s\) lowered")
    for rule, count in stages["lower"]["lowered_per_rule"].items():
        assert f"  {rule}: {count}\n" in text.stdout

    reference = json.loads(quantize(cli, tmp_path, "--json", "--reference").stdout)
    assert [s["name"] for s in reference["stages"]] == ["fuse", "prepare", "calibrate",
                                                         "convert"]


def run_with_terminal_stderr(cli, tmp_path, *flags):
    """stdout and what the tool wrote to a pseudo-terminal given as its stderr."""
    leader, follower = pty.openpty()
    try:
        result = quantize(cli, tmp_path, *flags, stderr=follower)
        os.close(follower)
        follower = None
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO once the terminal has no writer left
                break
            if not chunk:
                break
            chunks.append(chunk)
        return result, b"".join(chunks).decode()
    finally:
        if follower is not None:
            os.close(follower)
        os.close(leader)


def test_progress_goes_to_a_terminal_and_quiet_silences_it(cli, tmp_path):
    result, terminal = run_with_terminal_stderr(cli, tmp_path)
    assert result.returncode == 0
    for stage in ["fuse", "prepare", "calibrate", "convert", "lower"]:
        assert re.search(stage + r": done in \d+\.\d\d s", terminal), terminal
    assert re.search(r"calibrate: 3/3 samples, [\d.]+ samples/s, [\d.]+ s left", terminal)
    # Progress never reaches stdout, which keeps the report alone.
    assert "done in" not in result.stdout

    quiet, terminal = run_with_terminal_stderr(cli, tmp_path, "--quiet")
    assert quiet.returncode == 0
    assert terminal == ""
    assert quiet.stdout == result.stdout


def test_no_progress_when_stderr_is_not_a_terminal(cli, tmp_path):
    result = quantize(cli, tmp_path)
    assert result.returncode == 0
    assert result.stderr == ""
