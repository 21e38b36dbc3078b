"""@pybind11: the pybind11 headers of the Python extension, from a pip-installed pybind11.

Debian's pybind11 is 2.10, which reads NumPy's dtype structs with NumPy 1's layout: under
NumPy 2 (what PyTorch 2 environments have) `dtype.itemsize` reads another field. pybind11
2.12 and later read both layouts, so the extension is built against one of those, taken
from the first of:
  $FUSELAGE_PYBIND11_INCLUDE (a folder holding pybind11/pybind11.h),
  the PyTorch 2 environment of tools/pytorch2_env.sh ($FUSELAGE_PYTORCH2_ENV, else
  ${XDG_CACHE_HOME:-$HOME/.cache}/fuselage/pytorch2), which pins pybind11,
  `python3` on PATH.
Only //python:fuselage_core depends on it: the C++ library and the CLI build without it.
"""

_MIN_VERSION = (2, 12)

_BUILD = """
cc_library(
    name = "pybind11",
    hdrs = glob(["include/pybind11/**/*.h"]),
    includes = ["include"],
    deps = ["@system//:python_headers"],
    visibility = ["//visibility:public"],
)
"""

# Prints "<major> <minor> <version>" and the include folder, one line each.
_PROBE = """
import pybind11
print(pybind11.version_info[0], pybind11.version_info[1], pybind11.__version__)
print(pybind11.get_include())
"""

def _pytorch2_python(ctx):
    env = ctx.os.environ
    folder = env.get("FUSELAGE_PYTORCH2_ENV", "")
    if not folder:
        cache = env.get("XDG_CACHE_HOME", "") or (env.get("HOME", "/root") + "/.cache")
        folder = cache + "/fuselage/pytorch2"
    return folder + "/bin/python"

def _pybind11_repository_impl(ctx):
    include = ctx.os.environ.get("FUSELAGE_PYBIND11_INCLUDE", "")
    tried = []
    if not include:
        for python in [_pytorch2_python(ctx), "python3"]:
            result = ctx.execute([python, "-c", _PROBE])
            if result.return_code != 0:
                tried.append("%s: no pybind11" % python)
                continue
            version_line, folder = result.stdout.strip().split("\n")[:2]
            major, minor, version = version_line.split(" ")
            if (int(major), int(minor)) < _MIN_VERSION:
                tried.append("%s: pybind11 %s is older than 2.12" % (python, version))
                continue
            include = folder
            break
    if not include:
        fail("fuselage: no pybind11 >= 2.12 for the Python extension (%s); run " % "; ".join(tried) +
             "`bash tools/pytorch2_env.sh`, or set FUSELAGE_PYBIND11_INCLUDE")
    if not ctx.path(include + "/pybind11/pybind11.h").exists:
        fail("fuselage: %s holds no pybind11/pybind11.h" % include)
    ctx.symlink(include + "/pybind11", "include/pybind11")
    ctx.file("BUILD.bazel", _BUILD)

pybind11_repository = repository_rule(
    implementation = _pybind11_repository_impl,
    environ = ["FUSELAGE_PYBIND11_INCLUDE", "FUSELAGE_PYTORCH2_ENV", "XDG_CACHE_HOME", "HOME", "PATH"],
    local = True,
)
