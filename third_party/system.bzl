"""Repository rules that expose the system's C++ libraries to Bazel.

Everything comes from Debian 12 packages (tools/packages.txt) except LibTorch, which comes from
the PyPI `torch` wheel that tools/setup.sh installs into a virtual environment outside the work
tree (tools/python_requirements.txt pins its version). The wheel carries a complete LibTorch with
CUDA, cuDNN and NCCL; its CUDA libraries come from the `nvidia-*` wheels beside it.

Where LibTorch is found, first match wins:
  --repo_env=LIBTORCH_HOME=/opt/libtorch   a LibTorch archive or a wheel's site-packages/torch
  --repo_env=VISION_VENV=/path/to/venv     a virtual environment with torch installed
  $HOME/.cache/vision-train/venv           where tools/setup.sh puts it

CUDA headers and libraries are taken from the `nvidia-*` wheels next to a wheel's torch, else
from CUDA_HOME (default /usr/local/cuda). A LibTorch without libtorch_cuda.so builds CPU-only.
"""

_DEBIAN_LIBDIR = "/usr/lib/x86_64-linux-gnu"

def default_venv(rctx):
    return rctx.os.environ.get("VISION_VENV", "") or \
           rctx.os.environ.get("HOME", "/root") + "/.cache/vision-train/venv"

def _find_libtorch(rctx):
    home = rctx.os.environ.get("LIBTORCH_HOME", "")
    if home:
        return home
    venv = default_venv(rctx)
    found = rctx.execute(["sh", "-c", "ls -d %s/lib/python3*/site-packages/torch 2>/dev/null | head -n 1" % venv])
    home = found.stdout.strip()
    if not home:
        fail("LibTorch not found: no torch package in the virtual environment %s. " % venv +
             "Run tools/setup.sh (it installs torch from PyPI there), or point the build at a " +
             "LibTorch install with --repo_env=LIBTORCH_HOME=/path (see README).")
    return home

def _ls(rctx, pattern):
    res = rctx.execute(["sh", "-c", "ls -d %s 2>/dev/null" % pattern])
    return [p for p in res.stdout.strip().split("\n") if p]

def _libtorch_impl(rctx):
    # Re-run when the pinned torch version changes (setup.sh then installs the new wheel).
    rctx.read(Label("//tools:python_requirements.txt"))
    home = _find_libtorch(rctx)
    include = home + "/include"
    libdir = home + "/lib"
    if not rctx.path(include + "/torch/csrc/api/include/torch/torch.h").exists:
        fail("LibTorch headers not found under %s. LIBTORCH_HOME must hold include/ and lib/ " % include +
             "as the official LibTorch archive or a wheel's site-packages/torch do.")

    # Only LibTorch's own header trees: the wheel's include/ also holds protobuf, fmt, oneDNN and
    # others of its bundled versions, which must not shadow the Debian ones the project links.
    for sub in ["ATen", "c10", "caffe2", "torch"]:
        if rctx.path(include + "/" + sub).exists:
            rctx.symlink(include + "/" + sub, "include/" + sub)

    # c10d's ProcessGroupGloo.hpp includes Gloo's headers; the wheel lacks them (libgloo-dev).
    gloo = include + "/gloo" if rctx.path(include + "/gloo").exists else "/usr/include/gloo"
    rctx.symlink(gloo, "include/gloo")

    # "2.11": from TORCH_VERSION_MAJOR/MINOR, wherever this LibTorch's version.h keeps them.
    version = rctx.execute(["sh", "-c", "cat %s/torch/csrc/api/include/torch/version.h %s/torch/headeronly/version.h 2>/dev/null | " % (include, include) +
                                        "sed -n 's/^#define TORCH_VERSION_\\(MAJOR\\|MINOR\\) \\([0-9]*\\)$/\\2/p' | paste -sd."]).stdout.strip()

    cuda = rctx.path(libdir + "/libtorch_cuda.so").exists
    libs = ["torch", "torch_cpu", "c10"] + (["torch_cuda", "c10_cuda"] if cuda else [])
    cuda_libdirs = []
    cuda_includes = []
    if cuda:
        # A wheel: the CUDA runtime, NCCL and cuDNN come from the nvidia-* wheels beside torch.
        site = home.rpartition("/")[0]
        wheel_dirs = _ls(rctx, site + "/nvidia/*/include")
        cuda_home = rctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
        dirs = wheel_dirs + ([cuda_home + "/include"] if rctx.path(cuda_home + "/include").exists else [])
        for i, d in enumerate(dirs):
            rctx.symlink(d, "cuda_include/%d" % i)
            cuda_includes.append("cuda_include/%d" % i)
        cuda_libdirs = [d.rpartition("/")[0] + "/lib" for d in wheel_dirs] + [cuda_home + "/lib64"]
        cuda_libdirs = [d for d in cuda_libdirs if rctx.path(d).exists]
        if not _ls(rctx, " ".join([d + "/libcudart.so*" for d in cuda_libdirs])):
            fail("LibTorch at %s has CUDA but no CUDA runtime was found (looked in %s)" % (home, cuda_libdirs))

    linkopts = ["-L" + libdir, "-Wl,-rpath," + libdir]
    for d in cuda_libdirs:
        linkopts += ["-L" + d, "-Wl,-rpath," + d, "-Wl,-rpath-link," + d]
    linkopts += ["-Wl,--no-as-needed"] + ["-l" + l for l in libs] + ["-Wl,--as-needed", "-lpthread"]
    defines = ["USE_C10D_GLOO"] + (["USE_C10D_NCCL", "VISION_WITH_CUDA=1"] if cuda else [])
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    defines = {defines},
    linkopts = {linkopts},
    deps = {cuda_dep},
)

# CUDA runtime headers and library, for code that calls CUDA directly (kernels built by nvcc).
cc_library(
    name = "cuda_runtime",
    hdrs = glob(["cuda_include/**/*.h", "cuda_include/**/*.hpp", "cuda_include/**/*.cuh", "cuda_include/**/*.inl"]),
    includes = {cuda_includes},
    linkopts = {cudart},
)
""".format(
        defines = repr(defines),
        linkopts = repr(linkopts),
        cuda_dep = repr([":cuda_runtime"] if cuda else []),
        cuda_includes = repr(cuda_includes),
        cudart = repr(["-l:libcudart.so.13"] if cuda else []),
    ))
    rctx.file("config.bzl", "LIBTORCH_HOME = %r\nTORCH_VERSION = %r\nWITH_CUDA = %s\nCUDA_HOME = %r\n" % (
        home, version, cuda, rctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"))

libtorch_repository = repository_rule(
    implementation = _libtorch_impl,
    environ = ["LIBTORCH_HOME", "VISION_VENV", "HOME", "CUDA_HOME"],
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

def _python_venv_impl(rctx):
    venv = default_venv(rctx)
    python = venv + "/bin/python3"
    if rctx.path(python).exists:
        body = 'exec "%s" "$@"\n' % python
    else:
        # Only the targets that run Python (reference checks) need it; they fail with this.
        body = 'echo "python_venv: %s not found; run tools/setup.sh" >&2\nexit 1\n' % python
    rctx.file("python3.sh", "#!/usr/bin/env bash\n# The project's Python environment (tools/setup.sh).\n" + body, executable = True)
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# The venv's python3 (torch, torchvision, tensorboard of tools/python_requirements.txt), for
# tests that check our output with the reference Python packages.
sh_binary(
    name = "python3",
    srcs = ["python3.sh"],
)
""")

python_venv_repository = repository_rule(
    implementation = _python_venv_impl,
    environ = ["VISION_VENV", "HOME"],
    local = True,
)
