"""Repository rules that expose the system's C++ libraries to Bazel.

Everything comes from Debian 12 packages (tools/packages.txt) except LibTorch, whose location
can be overridden so the same sources build against a LibTorch 2.x (CUDA) install:

    bazel build --repo_env=LIBTORCH_HOME=/opt/libtorch //...

LIBTORCH_HOME must hold include/ and lib/ as in the official LibTorch archive or in
site-packages/torch of a pip wheel. Unset, Debian's libtorch-dev under /usr is used.
"""

_DEBIAN_LIBDIR = "/usr/lib/x86_64-linux-gnu"

def _libtorch_impl(rctx):
    home = rctx.os.environ.get("LIBTORCH_HOME", "")
    if home:
        include = home + "/include"
        libdir = home + "/lib"
    else:
        include = "/usr/include"
        libdir = _DEBIAN_LIBDIR
    if not rctx.path(include + "/torch/csrc/api/include/torch/torch.h").exists:
        fail("LibTorch headers not found under %s (LIBTORCH_HOME=%r). Install libtorch-dev " % (include, home) +
             "(tools/setup.sh) or point --repo_env=LIBTORCH_HOME at a LibTorch install.")
    for sub in ["ATen", "c10", "caffe2", "torch"]:
        if rctx.path(include + "/" + sub).exists:
            rctx.symlink(include + "/" + sub, "include/" + sub)

    # c10d's ProcessGroupGloo.hpp includes Gloo's headers; pip wheels may lack them.
    gloo = include + "/gloo" if rctx.path(include + "/gloo").exists else "/usr/include/gloo"
    rctx.symlink(gloo, "include/gloo")

    cuda = rctx.path(libdir + "/libtorch_cuda.so").exists
    libs = ["torch", "torch_cpu", "c10"] + (["torch_cuda", "c10_cuda"] if cuda else [])
    linkopts = ["-L" + libdir, "-Wl,-rpath," + libdir, "-Wl,--no-as-needed"] + \
               ["-l" + l for l in libs] + ["-Wl,--as-needed", "-lpthread"]
    defines = ["USE_C10D_GLOO"] + (["USE_C10D_NCCL", "VISION_WITH_CUDA=1"] if cuda else [])
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    defines = {defines},
    linkopts = {linkopts},
)
""".format(defines = repr(defines), linkopts = repr(linkopts)))
    rctx.file("config.bzl", "LIBTORCH_HOME = %r\nWITH_CUDA = %s\n" % (home, cuda))

libtorch_repository = repository_rule(
    implementation = _libtorch_impl,
    environ = ["LIBTORCH_HOME"],
    local = True,
)

def _absl_impl(rctx):
    # Link every abseil component: Debian splits it into ~80 shared libraries and
    # --as-needed drops the ones a binary does not use.
    listing = rctx.execute(["sh", "-c", "ls %s | sed -n 's/^libabsl_\\(.*\\)\\.so$/\\1/p'" % _DEBIAN_LIBDIR])
    names = [n for n in listing.stdout.strip().split("\n") if n]
    if not names:
        fail("abseil not found in %s: install libabsl-dev (tools/setup.sh)" % _DEBIAN_LIBDIR)
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "absl",
    linkopts = ["-Wl,--as-needed"] + {libs},
)
""".format(libs = repr(["-labsl_" + n for n in names])))

absl_repository = repository_rule(implementation = _absl_impl, local = True)
