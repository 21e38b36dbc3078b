"""PyTorch 1.13.1's own FX quantization tests, run with fuselage substituted (issue 41).

    /usr/bin/python3 tests/conformance/pytorch_fx_suite/run.py [--min-percent 90] [-k REGEX]
        [--reuse-torch] [--list-failures]

Fetches PyTorch 1.13.1's unmodified test/quantization/fx/test_quantize_fx.py from Debian's
source package (the orig tarball whose URI and sha256 `apt-get source --print-uris pytorch`
prints, with a private deb-src list: nothing in /etc/apt is changed), checks the file's
sha256 and caches it outside the checkout ($FUSELAGE_CACHE or ~/.cache/fuselage/
pytorch_fx_suite; with expecttest, which PyTorch's test utilities import and Debian does not
package, pip-installed there). Then runs it twice, each in its own process, under Debian's PyTorch 1.13:

  torch     as shipped, with one change: the FBGEMM skip lifted (Debian's PyTorch has no
            FBGEMM; the "fbgemm" engine is served by onednn, which implements the same
            x86 reduce-range int8 arithmetic);
  fuselage  the same, with fuselage.quantize_fx's fuse_fx, prepare_fx, prepare_qat_fx,
            convert_fx and convert_to_reference_fx substituted for PyTorch's in
            torch.ao.quantization.quantize_fx, torch.quantization.quantize_fx,
            torch.testing._internal.common_quantization and the test module's globals.

and prints how many tests pass on PyTorch, how many of those pass with fuselage, and the
percentage; with --min-percent it exits 1 below that bar. Per-test outcomes (with the first
line of each failure) go to <cache>/results-<mode>.json for KNOWN_FAILURES.md.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

SOURCE_PACKAGE = "pytorch"
ORIG_TARBALL = "pytorch_1.13.1+dfsg.orig.tar.xz"
MEMBER = "pytorch-1.13.1/test/quantization/fx/test_quantize_fx.py"
# sha256 of the unmodified test file in Debian's pytorch_1.13.1+dfsg.orig.tar.xz (whose own
# sha256, d0355588b8528566d477e6ebf1b4d9d036a6fd75711339f66b27472ce5879dc7, apt checks).
TEST_FILE_SHA256 = "64c472193ca9beaf47d13cf24f9f66257da7e15a815ddb1dd45d6630da8d433f"
DEB_SRC = "deb-src http://deb.debian.org/debian bookworm main\n"
PER_TEST_SECONDS = 300


def cache_dir():
    root = os.environ.get("FUSELAGE_CACHE", os.path.expanduser("~/.cache/fuselage"))
    path = os.path.join(root, "pytorch_fx_suite")
    os.makedirs(path, exist_ok=True)
    return path


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _apt(args, workdir):
    """apt-get with a private deb-src list and package lists under `workdir`."""
    lists = os.path.join(workdir, "lists")
    os.makedirs(os.path.join(lists, "partial"), exist_ok=True)
    sources = os.path.join(workdir, "sources.list")
    with open(sources, "w") as f:
        f.write(DEB_SRC)
    cmd = ["apt-get", "-qq", "-o", f"Dir::Etc::sourcelist={sources}",
           "-o", "Dir::Etc::sourceparts=/nonexistent", "-o", f"Dir::State::Lists={lists}",
           "-o", "Debug::NoLocking=1"] + args
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _orig_tarball_uri(workdir):
    _apt(["update"], workdir)
    out = _apt(["source", "--print-uris", SOURCE_PACKAGE], workdir)
    for line in out.splitlines():
        m = re.match(r"'(\S+)' (\S+) \d+ SHA256:([0-9a-f]{64})", line)
        if m and m.group(2) == ORIG_TARBALL:
            return m.group(1), m.group(3)
    raise SystemExit(f"apt-get source --print-uris {SOURCE_PACKAGE} names no {ORIG_TARBALL}:\n"
                     + out)


def fetch():
    """The cached test file, fetched and checked if it is not there yet."""
    cache = cache_dir()
    test_file = os.path.join(cache, "test_quantize_fx.py")
    if not os.path.exists(test_file):
        tarball = os.path.join(cache, ORIG_TARBALL)
        if not os.path.exists(tarball):
            uri, sha = _orig_tarball_uri(os.path.join(cache, "apt"))
            print(f"fetching {uri}", file=sys.stderr)
            with urllib.request.urlopen(uri, timeout=600) as r, \
                    open(tarball + ".part", "wb") as f:
                shutil.copyfileobj(r, f)
            if _sha256(tarball + ".part") != sha:
                raise SystemExit(f"{uri}: sha256 differs from the one apt prints ({sha})")
            os.replace(tarball + ".part", tarball)
        with tarfile.open(tarball) as tar:
            member = tar.getmember(MEMBER)
            with tar.extractfile(member) as src, open(test_file + ".part", "wb") as dst:
                shutil.copyfileobj(src, dst)
        os.replace(test_file + ".part", test_file)
    digest = _sha256(test_file)
    if digest != TEST_FILE_SHA256:
        raise SystemExit(f"{test_file}: sha256 {digest}, expected {TEST_FILE_SHA256}")
    return test_file


# --- inside one run's process -------------------------------------------------------------

def _lift_fbgemm_skip():
    """Debian's PyTorch has no FBGEMM: report it supported and serve it by onednn."""
    import torch
    import torch.backends.quantized as bq

    cls = type(bq)
    real_supported = cls.__dict__["supported_engines"]
    real_engine = cls.__dict__["engine"]
    requested = {"name": None}

    class Supported:
        def __get__(self, obj, objtype):
            engines = real_supported.__get__(obj, objtype)
            return engines + ["fbgemm"] if "fbgemm" not in engines else engines

        def __set__(self, obj, val):
            raise RuntimeError("Assignment not supported")

    class Engine:
        def __get__(self, obj, objtype):
            name = real_engine.__get__(obj, objtype)
            return "fbgemm" if name == "onednn" and requested["name"] == "fbgemm" else name

        def __set__(self, obj, val):
            requested["name"] = val
            real_engine.__set__(obj, "onednn" if val == "fbgemm" else val)

    cls.supported_engines = Supported()
    cls.engine = Engine()
    del torch


FUNCTIONS = ("fuse_fx", "prepare_fx", "prepare_qat_fx", "convert_fx", "convert_to_reference_fx")


def _substitute(namespaces):
    import fuselage.quantize_fx as fqfx

    for ns in namespaces:
        for name in FUNCTIONS:
            if name in ns:
                ns[name] = getattr(fqfx, name)


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout(f"test ran over {PER_TEST_SECONDS} s")


def ensure_expecttest(python):
    """torch.testing._internal.common_utils imports expecttest, which Debian does not
    package: pip-installed into the cache (PyPI's expecttest 0.1.6, pure Python)."""
    site = os.path.join(cache_dir(), "site")
    probe = subprocess.run([python, "-c", "import expecttest"], capture_output=True)
    if probe.returncode != 0 and not os.path.isdir(os.path.join(site, "expecttest")):
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--target", site,
                        "expecttest==0.1.6"], check=True)
    return site


def run_in_process(test_file, mode, out_path, pattern):
    import unittest
    import warnings

    sys.path.insert(0, os.path.join(REPO, "python"))
    sys.path.append(os.path.join(cache_dir(), "site"))
    _lift_fbgemm_skip()
    import torch.ao.quantization.quantize_fx as ao_qfx
    import torch.quantization.quantize_fx as old_qfx
    import torch.testing._internal.common_quantization as cq
    if mode == "fuselage":
        _substitute([vars(ao_qfx), vars(old_qfx), vars(cq)])
    import importlib.util
    spec = importlib.util.spec_from_file_location("test_quantize_fx", test_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_quantize_fx"] = module
    spec.loader.exec_module(module)
    if mode == "fuselage":
        _substitute([vars(module)])

    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    if pattern:
        suite = unittest.TestSuite(t for t in _flatten(suite) if re.search(pattern, t.id()))
    outcomes = {}

    class Result(unittest.TestResult):
        def startTest(self, test):
            super().startTest(test)
            self._t0 = time.time()
            signal.alarm(PER_TEST_SECONDS)

        def stopTest(self, test):
            signal.alarm(0)
            super().stopTest(test)
            outcomes.setdefault(_name(test), {"outcome": "pass"})["seconds"] = round(
                time.time() - self._t0, 2)

        def _record(self, test, outcome, err=None):
            entry = {"outcome": outcome}
            if err is not None:
                exc = err[1]
                entry["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:400]
                tb = traceback.extract_tb(err[2])
                entry["where"] = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in tb[-4:]]
            outcomes[_name(test)] = entry

        def addError(self, test, err):
            super().addError(test, err)
            self._record(test, "error", err)

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._record(test, "fail", err)

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            outcomes[_name(test)] = {"outcome": "skip", "error": reason}

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            outcomes[_name(test)] = {"outcome": "xfail"}

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            outcomes[_name(test)] = {"outcome": "xpass"}

    signal.signal(signal.SIGALRM, _on_alarm)
    warnings.simplefilter("ignore")
    suite.run(Result())
    with open(out_path, "w") as f:
        json.dump(outcomes, f, indent=1, sort_keys=True)


def _flatten(suite):
    import unittest
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _flatten(t)
        else:
            yield t


def _name(test):
    # "test_quantize_fx.TestQuantizeFx.test_conv_module" -> "TestQuantizeFx.test_conv_module"
    return ".".join(test.id().split(".")[-2:])


# --- the driver ---------------------------------------------------------------------------

def _run_mode(test_file, mode, pattern, python):
    # A selection (-k) writes a file of its own: results-torch.json stays the whole run's,
    # which --reuse-torch reads.
    out = os.path.join(cache_dir(), f"results-{mode}{'-selected' if pattern else ''}.json")
    cmd = [python, os.path.abspath(__file__), "--child", mode, "--out", out]
    if pattern:
        cmd += ["-k", pattern]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    with tempfile.TemporaryFile("w+") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        if rc != 0 or not os.path.exists(out):
            log.seek(0)
            sys.stderr.write(log.read()[-4000:])
            raise SystemExit(f"{mode} run exited {rc}")
    with open(out) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", choices=["torch", "fuselage"])
    p.add_argument("--out")
    p.add_argument("-k", dest="pattern", help="only tests whose id matches this regex")
    p.add_argument("--min-percent", type=float)
    p.add_argument("--reuse-torch", action="store_true",
                   help="reuse the cached PyTorch run (results-torch.json)")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--list-failures", action="store_true",
                   help="list the tests passing on PyTorch that fail with fuselage")
    a = p.parse_args()
    test_file = fetch()
    ensure_expecttest(a.python)
    if a.child:
        run_in_process(test_file, a.child, a.out, a.pattern)
        return 0
    t0 = time.time()
    cached = os.path.join(cache_dir(), "results-torch.json")
    if a.reuse_torch and os.path.exists(cached):
        with open(cached) as f:
            torch_results = json.load(f)
    else:
        torch_results = _run_mode(test_file, "torch", a.pattern, a.python)
    t1 = time.time()
    fuselage_results = _run_mode(test_file, "fuselage", a.pattern, a.python)
    t2 = time.time()
    passing = sorted(n for n, r in torch_results.items() if r["outcome"] == "pass" and
                     (not a.pattern or n in fuselage_results))
    both = [n for n in passing if fuselage_results.get(n, {}).get("outcome") == "pass"]
    percent = 100.0 * len(both) / len(passing) if passing else 0.0
    if a.list_failures:
        for n in passing:
            r = fuselage_results.get(n, {"outcome": "missing"})
            if r["outcome"] != "pass":
                print(f"{n}: {r['outcome']}: {r.get('error', '')[:160]}")
    print(f"PyTorch 1.13.1 test_quantize_fx.py (sha256 {TEST_FILE_SHA256[:12]}...): "
          f"{len(torch_results)} tests")
    print(f"  pass on PyTorch (FBGEMM skip lifted): {len(passing)}   [{t1 - t0:.0f} s]")
    print(f"  of those, pass with fuselage:        {len(both)}   [{t2 - t1:.0f} s]")
    print(f"  percentage:                           {percent:.1f} %")
    if a.min_percent is not None and percent < a.min_percent:
        print(f"below the bar of {a.min_percent} %")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
