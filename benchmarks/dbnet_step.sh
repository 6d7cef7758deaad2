#!/usr/bin/env bash
# DBNet-ResNet-18 forward+backward step time on CPU (one thread), ours against the same
# network written in Python PyTorch, in one command:
#   bash benchmarks/dbnet_step.sh [--repeats=3] [--size=640 --batch=2 --steps=3]
# The sides run alternately --repeats times (load from other users of a shared machine falls
# on both), each ratio is taken within one round, and the median of the rounds' ratios is
# printed with its spread. Rows, like for like first:
#   both keep freed memory: ours as //tools:train runs (freed host memory kept for reuse,
#     core/host_memory.h), Python with the same malloc settings through the environment;
#   as shipped: ours as above, Python with glibc's defaults;
#   glibc malloc defaults: both with glibc's defaults;
#   head as modules: ours with DBNetOptions.head_implementation MODULES (the head's transposed
#     convolutions as ConvTranspose2d, as Python runs them), both keeping freed memory: what
#     the default PHASE_MATMUL head (models/dbnet/db_head.h) gains.
#   winograd: ours with TrainPipelineConfig.cpu_convolution WINOGRAD (--cpu_convolution=
#     winograd: the 3x3 stride-1 convolutions by Winograd F(4x4, 3x3), models/ops/
#     winograd_conv.h; oneDNN has no Winograd for AVX2, so PyTorch cannot run it), both keeping
#     freed memory: same float32 inputs and outputs, another algorithm with ~10x the rounding.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
repeats=3
args=(--size=640 --batch=2 --steps=3)
for arg in "$@"; do
  case "${arg}" in
    --repeats=*) repeats="${arg#--repeats=}" ;;
    *) args+=("${arg}") ;;
  esac
done
bazel build -c opt //models/dbnet:activation_memory_benchmark >/tmp/dbnet_step_build.log 2>&1 ||
  { cat /tmp/dbnet_step_build.log; exit 1; }
echo "config: DBNet-ResNet-18, inner channels 256, ${args[*]}, 1 intra-op thread, ${repeats} rounds"
bin="$(bazel info -c opt bazel-bin)/models/dbnet/activation_memory_benchmark"
step() { sed -n 's/.*step \([0-9.]*\) s.*/\1/p'; }
tuned=(env MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824)
rounds=()
for ((i = 0; i < repeats; ++i)); do
  ours=$("${bin}" "${args[@]}" | step)
  ours_modules=$("${bin}" "${args[@]}" --head_implementation=modules | step)
  ours_default=$("${bin}" "${args[@]}" --retain_host_memory=false | step)
  ours_winograd=$("${bin}" "${args[@]}" --cpu_convolution=winograd | step)
  peer=$("${peer_python}" benchmarks/dbnet_peer.py "${args[@]}" | step)
  peer_tuned=$("${tuned[@]}" "${peer_python}" benchmarks/dbnet_peer.py "${args[@]}" | step)
  echo "round $((i + 1)): ours ${ours} s (head as modules ${ours_modules}, glibc defaults" \
    "${ours_default}, winograd ${ours_winograd}), python ${peer_tuned} s (glibc defaults ${peer})"
  rounds+=("${ours},${ours_modules},${ours_default},${peer},${peer_tuned},${ours_winograd}")
done
PYTHONPATH=benchmarks "${peer_python}" - "${rounds[@]}" <<'PY'
import sys
from paired_ratios import step_table
step_table(sys.argv[1:], [
    ("both keep freed memory", 0, 4, ""),
    ("as shipped", 0, 3, "(ours keeps freed host memory, python default malloc)"),
    ("glibc malloc defaults", 2, 3, ""),
    ("head as modules", 1, 4, "(both keep freed memory)"),
    ("winograd", 5, 4, "(ours with cpu_convolution WINOGRAD; both keep freed memory)")])
PY
