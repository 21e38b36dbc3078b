"""fuselage_fuzz_target: one fuzz target = one .cc defining LLVMFuzzerTestOneInput.

For a target `name` it declares:
  :name_lib         the harness (alwayslink cc_library),
  :name             a binary: libFuzzer under --config=fuzz, else the replay driver
                    (tagged manual + fuzz_target; tools/fuzz.sh finds it by that tag),
  :name_regression  a cc_test replaying tests/fuzz/corpus/<name>/ (seeds and every crash
                    found, kept as regressions) with the replay driver, so the corpus runs
                    in the ordinary gcc test suite and under --config=asan/ubsan.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

def fuselage_fuzz_target(name, srcs, deps = []):
    cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = srcs,
        deps = deps + ["//tests/fuzz:fuzz_check"],
        alwayslink = True,
    )
    cc_binary(
        name = name,
        testonly = True,
        deps = [":" + name + "_lib"] + select({
            "//tests/fuzz:libfuzzer": [],
            "//conditions:default": ["//tests/fuzz:replay_main"],
        }),
        linkopts = select({
            "//tests/fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        tags = ["manual", "fuzz_target"],
    )
    corpus = "corpus/" + name
    cc_test(
        name = name + "_regression",
        size = "small",
        deps = [":" + name + "_lib", "//tests/fuzz:replay_main"],
        data = native.glob([corpus + "/**"]),
        args = [native.package_name() + "/" + corpus],
    )
