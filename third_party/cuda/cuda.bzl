"""cuda_library: CUDA kernels (.cu) compiled by nvcc into a cc_library.

    load("//third_party/cuda:cuda.bzl", "cuda_library")

    cuda_library(
        name = "nms_cuda",
        srcs = ["nms_cuda.cu"],
        hdrs = ["nms_cuda.h"],
        deps = ["@libtorch"],
    )

`name` is an ordinary cc_library (hdrs, deps, the nvcc-built objects and the CUDA runtime) that
any cc_library or cc_test may depend on. Each .cu becomes one PIC object, built with the include
paths and defines of `deps` (their CcInfo: -I, -iquote as -I, -isystem, -D), the workspace root,
and SASS for compute capabilities 8.0 and 9.0 plus compute_90 PTX, so newer GPUs JIT the PTX.

Without CUDA (@libtorch's WITH_CUDA is false) the .cu files are not built and `name` holds only
hdrs and deps; callers keep their CUDA calls behind `#ifdef VISION_WITH_CUDA`, which @libtorch
defines exactly when WITH_CUDA is true.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@libtorch//:config.bzl", "CUDA_HOME", "WITH_CUDA")

NVCC = CUDA_HOME + "/bin/nvcc"

# One front-end pass per virtual architecture: compute_90 serves both the sm_90 SASS and the
# embedded PTX, so a file costs two device compilations, not three.
NVCC_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
]

def _cuda_objects_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    compilation = cc_common.merge_cc_infos(
        cc_infos = [dep[CcInfo] for dep in ctx.attr.deps],
    ).compilation_context

    # nvcc has no -iquote; the quote paths (the workspace root and its generated twin among them)
    # become -I, searched before -isystem as Bazel's own compiles search them.
    include_flags = (
        ["-I.", "-I" + ctx.bin_dir.path] +
        ["-I" + d for d in compilation.quote_includes.to_list()] +
        ["-I" + d for d in compilation.includes.to_list()] +
        [f for d in compilation.system_includes.to_list() for f in ("-isystem", d)] +
        ["-D" + d for d in compilation.defines.to_list()]
    )
    inputs = depset(
        ctx.files.srcs + ctx.files.hdrs,
        transitive = [compilation.headers, cc_toolchain.all_files],
    )
    objects = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(".cu")]
        obj = ctx.actions.declare_file("_objs/%s/%s.pic.o" % (ctx.label.name, stem))
        args = ctx.actions.args()
        args.add(NVCC)
        args.add_all(NVCC_GENCODE + NVCC_FLAGS)
        args.add("-ccbin=" + cc_toolchain.compiler_executable)
        args.add_all(include_flags)
        args.add_all(ctx.attr.copts)
        args.add_all(["-c", src, "-o", obj])

        # The check makes a missing toolkit one readable line instead of a shell "not found".
        ctx.actions.run_shell(
            command = """
if [ ! -x "$1" ]; then
  echo "cuda_library: nvcc not found at $1. Install the CUDA 13 toolkit" >&2
  echo "(NVIDIA's cuda-toolkit-13-0 package puts it in /usr/local/cuda) or point the" >&2
  echo "build at yours with --repo_env=CUDA_HOME=/path." >&2
  exit 1
fi
exec "$@"
""",
            arguments = [args],
            inputs = inputs,
            outputs = [obj],
            mnemonic = "NvccCompile",
            progress_message = "Compiling CUDA %s" % src.short_path,
            use_default_shell_env = True,
        )
        objects.append(obj)
    # Runfiles too, so tests can inspect the objects (gencode_test).
    return [DefaultInfo(files = depset(objects), runfiles = ctx.runfiles(files = objects))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "_cc_toolchain": attr.label(
            default = Label("@bazel_tools//tools/cpp:current_cc_toolchain"),
        ),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu srcs nvcc compiles; copts go to nvcc. Other kwargs: cc_library's."""
    if not WITH_CUDA:
        native.cc_library(name = name, hdrs = hdrs, deps = deps, **kwargs)
        return
    deps = deps + ["@libtorch//:cuda_runtime"]
    _cuda_objects(
        name = name + "_objects",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps,
        copts = copts,
        testonly = kwargs.get("testonly", False),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_objects"],
        hdrs = hdrs,
        deps = deps,
        **kwargs
    )
