#!/usr/bin/env bash
# Builds the bundle of the prepared GPU check (benchmarks/gpu/README.md), here, where Bazel and
# the Debian libraries are: the check's binaries (-c opt, stripped), the shared libraries they
# load that the GPU machine lacks, and the Python peer, as one xz-compressed tar in
# benchmarks/gpu/bundle/ (git-ignored; the device tool carries it with
# carry: ["benchmarks/gpu/bundle"]).
#   bash benchmarks/gpu/make_bundle.sh
#
# The GPU machine has glibc, libstdc++ and libgcc, and LibTorch with its CUDA libraries in its
# Python's site-packages (torch/lib, nvidia/*/lib, the same torch==2.11.0 wheel this build
# links): the bundle carries the rest of the ldd closure, and checks that it is complete (every
# library the binaries and bundled libraries need resolves from the bundle, the wheel or that
# base set, nothing from elsewhere in /usr).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source benchmarks/peer_python.sh

out=benchmarks/gpu/bundle
# The device tool carries at most 64 MiB: working tree and carried folders together.
limit_bytes=$((64 * 1024 * 1024))

# What the check runs: the DBNet, DANet and Mask R-CNN steps, the comm benchmark, the quick start's generator and
# trainer, every CUDA operator test (cc_test under //models/ops) there is, and the model and
# engine tests with CUDA cases (the whole DBNet, Mask R-CNN and DANet against the CPU; Mask
# R-CNN's anchor generator, RPN and RoI heads; the multi-tensor optimizers): every
# models/<model>/*_test.cc outside models/ops and engine/<package>/*_test.cc that checks
# torch::cuda::is_available().
targets=(//models/dbnet:activation_memory_benchmark //models/danet:danet_step_benchmark
         //models/mask_rcnn:mask_rcnn_benchmark //distributed/strategies:comm_benchmark
         //data/synthetic:make_synthetic_text //tools:train)
ops_tests=()
if [[ -f models/ops/BUILD.bazel || -f models/ops/BUILD ]]; then
  mapfile -t ops_tests < <(bazel query 'kind(cc_test, tests(//models/ops/...))' 2>/dev/null)
fi
model_cuda_tests=()
while IFS= read -r src; do
  model_cuda_tests+=("//$(dirname "${src}"):$(basename "${src}" .cc)")
done < <(grep -l 'cuda::is_available' models/*/*_test.cc engine/*/*_test.cc 2>/dev/null |
         grep -v '^models/ops/')
echo "building ${targets[*]}, ${#ops_tests[@]} operator test(s) and" \
  "${#model_cuda_tests[@]} model test(s) with CUDA cases (${model_cuda_tests[*]}) with -c opt"
bazel build -c opt "${targets[@]}"
# An operator test that does not build leaves the rest of the check intact: it is named below.
if ((${#ops_tests[@]} + ${#model_cuda_tests[@]})); then
  bazel build -c opt --keep_going "${ops_tests[@]}" "${model_cuda_tests[@]}" ||
    echo "warning: some tests failed to build; the bundle has those that built" >&2
fi
bin_root="$(bazel info -c opt bazel-bin)"

stage=$(mktemp -d)
trap 'rm -rf "${stage}"' EXIT
mkdir -p "${stage}/bin/ops" "${stage}/bin/cuda_tests" "${stage}/lib" "${stage}/peers"
label_path() { local l=${1#//}; echo "${l/://}"; }
for t in "${targets[@]}"; do
  cp "${bin_root}/$(label_path "${t}")" "${stage}/bin/"
done
missing_tests=()
for t in "${ops_tests[@]}"; do
  f="${bin_root}/$(label_path "${t}")"
  if [[ -x "${f}" ]]; then cp "${f}" "${stage}/bin/ops/"; else missing_tests+=("${t}"); fi
done
for t in "${model_cuda_tests[@]}"; do
  f="${bin_root}/$(label_path "${t}")"
  if [[ -x "${f}" ]]; then cp "${f}" "${stage}/bin/cuda_tests/"; else missing_tests+=("${t}"); fi
done
chmod u+w "${stage}"/bin/* "${stage}"/bin/ops/* "${stage}"/bin/cuda_tests/* 2>/dev/null || true
# -c opt binaries keep their symbol tables (--strip=never in .bazelrc): not needed there.
find "${stage}/bin" -type f -exec strip --strip-unneeded {} +
# The Python peers of the step benchmarks, what they share, and the DANet head they import.
cp benchmarks/dbnet_peer.py benchmarks/danet_peer.py benchmarks/mask_rcnn_peer.py \
  benchmarks/peer_step.py \
  models/danet/testdata/make_danet_golden.py "${stage}/peers/"

# Where the GPU machine's LibTorch comes from: the same wheel as here.
torch_dir=$("${peer_python}" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
site_dir=$(dirname "${torch_dir}")
provided=("${torch_dir}/lib" "${site_dir}"/nvidia/*/lib)
provided_path=$(IFS=:; echo "${provided[*]}")
# glibc's libraries, libstdc++ and libgcc: part of every Linux the wheel runs on.
base=(linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libmvec.so.1 libpthread.so.0
      libdl.so.2 librt.so.1 libresolv.so.2 libutil.so.1 libanl.so.1 libstdc++.so.6 libgcc_s.so.1)
base_set="^($(IFS='|'; echo "${base[*]}" | sed 's/[.+]/\\&/g'))\$"
from_wheel() {
  local real
  real=$(readlink -f "$1")
  [[ "${real}" == "${torch_dir}/"* || "${real}" == "${site_dir}/nvidia/"* ]]
}

# The closure: every library ldd resolves for the binaries (ldd follows the whole tree), copied
# under the name the loader asks for, except the wheel's and the base set.
for f in "${stage}"/bin/* "${stage}"/bin/ops/* "${stage}"/bin/cuda_tests/*; do
  [[ -f "${f}" ]] || continue
  while read -r name path; do
    if [[ "${path}" == "not" ]]; then
      echo "error: ${f##*/} needs ${name}, which resolves nowhere here" >&2
      exit 1
    fi
    [[ "${name}" =~ ${base_set} ]] && continue
    from_wheel "${path}" && continue
    [[ -f "${stage}/lib/${name}" ]] || cp -L "${path}" "${stage}/lib/${name}"
  done < <(LD_LIBRARY_PATH="${provided_path}" ldd "${f}" | awk '$2 == "=>" {print $1, $3}')
done

# Completeness, as the GPU machine will load them: with the bundle first on the path, every
# library of every binary and bundled library resolves to the bundle, the wheel or the base set.
# Anything found elsewhere (/usr/lib) would be missing there.
problems=0
for f in "${stage}"/bin/* "${stage}"/bin/ops/* "${stage}"/bin/cuda_tests/* "${stage}"/lib/*; do
  [[ -f "${f}" ]] || continue
  while read -r name path; do
    if [[ "${path}" == "not" ]]; then
      echo "incomplete: ${f##*/} needs ${name}: not found" >&2
      problems=$((problems + 1))
    elif [[ ! "${name}" =~ ${base_set} && "${path}" != "${stage}/lib/"* ]] &&
         ! from_wheel "${path}"; then
      echo "incomplete: ${f##*/} needs ${name}: resolved from ${path}, outside the bundle" >&2
      problems=$((problems + 1))
    fi
  done < <(LD_LIBRARY_PATH="${stage}/lib:${provided_path}" ldd "${f}" |
           awk '$2 == "=>" {print $1, $3}')
done
if ((problems)); then
  echo "error: the bundle's library closure is incomplete (${problems} entries above)" >&2
  exit 1
fi

raw_bytes=$(du -sb "${stage}" | cut -f1)
{
  echo "vision-train GPU check bundle"
  dirty=$(git diff --quiet HEAD -- . 2>/dev/null || echo ' with uncommitted changes')
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD)${dirty}"
  echo "libtorch: torch $("${peer_python}" -c 'import torch; print(torch.__version__)')" \
    "(the GPU machine must have the same)"
  # What the base set there must be at least: the newest symbol versions anything here uses.
  echo "needs: $(for v in GLIBC_ GLIBCXX_ CXXABI_; do
    find "${stage}/bin" "${stage}/lib" -type f -exec objdump -T {} + 2>/dev/null |
      grep -o "${v}[0-9.]*" | sort -Vu | tail -n 1; done | paste -sd' ')"
  echo "binaries:"
  (cd "${stage}/bin" && find . -type f | sort | sed 's|^\./|  |')
  for t in "${missing_tests[@]}"; do echo "  (did not build: ${t})"; done
  echo "libraries ($(ls "${stage}/lib" | wc -l), ${raw_bytes} bytes unpacked with the binaries):"
  (cd "${stage}/lib" && ls -S | while read -r l; do
    printf '  %10d  %s\n' "$(stat -c %s "${l}")" "${l}"
  done)
} > "${stage}/MANIFEST.txt"

rm -rf "${out}"
mkdir -p "${out}"
echo "compressing (xz -9e)..."
tar -C "${stage}" -cf - . | xz -9e -T0 > "${out}/bundle.tar.xz"
cp "${stage}/MANIFEST.txt" "${out}/"

bundle_bytes=$(du -sb "${out}" | cut -f1)
# What the device tool copies besides: tracked files and untracked files git does not ignore.
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } |
  xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
total=$((bundle_bytes + tree_bytes))
cat "${out}/MANIFEST.txt"
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "bundle: $(mib "${bundle_bytes}") compressed ($(mib "${raw_bytes}") unpacked); working tree" \
  "$(mib "${tree_bytes}"); together $(mib "${total}") of the device tool's 64 MiB"
if ((total > limit_bytes)); then
  echo "error: bundle and working tree exceed what the device tool carries" >&2
  exit 1
fi
echo "closure complete: every NEEDED entry resolves from the bundle, the torch wheel or" \
  "glibc/libstdc++/libgcc"
