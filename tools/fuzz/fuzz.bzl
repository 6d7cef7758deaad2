"""vision_fuzz_target: one fuzz entry point (LLVMFuzzerTestOneInput), two binaries.

  <name>_fuzzer     With --config=fuzz (clang, tools/fuzz/run_fuzzers.sh) a libFuzzer binary;
                    otherwise the entry point with a replay main (runs the files it is given).
  <name>_fuzz_test  A plain cc_test (part of `bazel test //...`) that replays the seed corpus
                    and the regression inputs under testdata/fuzz/<name>/ plus `seeds`.
"""

def vision_fuzz_target(name, srcs, deps, seeds = [], linkstatic = True, size = "small"):
    native.cc_library(
        name = name + "_entry",
        testonly = True,
        srcs = srcs,
        deps = deps + [":fuzz_util"],
        alwayslink = True,
    )
    native.cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        linkstatic = linkstatic,
        linkopts = select({
            ":fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = [":" + name + "_entry"] + select({
            ":fuzzing": [],
            "//conditions:default": [":replay_main"],
        }),
    )
    native.cc_test(
        name = name + "_fuzz_test",
        size = size,
        linkstatic = linkstatic,
        data = ["//testdata/fuzz:" + name] + seeds,
        args = ["testdata/fuzz/" + name] + ["$(rootpaths %s)" % s for s in seeds],
        deps = [":" + name + "_entry", ":replay_main"],
    )
