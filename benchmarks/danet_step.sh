#!/usr/bin/env bash
# One DANet training step (forward, three cross-entropy losses, backward, SGD) on CPU, ours
# (//models/danet:danet_step_benchmark) against the same network written in Python PyTorch
# (benchmarks/danet_peer.py), same sizes and intra-op threads, in one command:
#   bash benchmarks/danet_step.sh [--repeats=3] [--depth=18 --height=128 --width=128 --batch=4
#                                 --steps=5 --threads=1]
# The defaults are the quick start's (dilated ResNet-18, 128x128 crops, 4 images per process);
# the paper's sizes are --depth=101 --height=768 --width=768 --batch=1 (minutes per step on CPU).
# Each round runs every configuration once, alternating, and each ratio is taken within a round
# (benchmarks/paired_ratios.py spread), so that load from other users of a shared machine falls
# on both sides. Configurations: both sides with glibc's malloc defaults (like for like), both
# keeping freed host memory (ours as //tools:train runs, python with the same MALLOC_*
# thresholds), and ours with --cpu_convolution=winograd (TrainPipelineConfig.cpu_convolution
# WINOGRAD: the 3x3 stride-1 convolutions, dilated ones included, by Winograd F(4x4, 3x3),
# models/ops/winograd_conv.h) both ways. Then ours once more with activation checkpointing
# (backbone.layer3/4 and both attention modules): peak resident memory and step time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
repeats=3
args=(--depth=18 --height=128 --width=128 --batch=4 --steps=5 --threads=1)
for arg in "$@"; do
  case "${arg}" in
    --repeats=*) repeats="${arg#--repeats=}" ;;
    *) args+=("${arg}") ;;
  esac
done
bazel build //models/danet:danet_step_benchmark >/tmp/danet_step_build.log 2>&1 ||
  { cat /tmp/danet_step_build.log; exit 1; }
echo "config: DANet ${args[*]}, ${repeats} rounds"
bin="$(bazel info bazel-bin)/models/danet/danet_step_benchmark"
step() { sed -n 's/.*median step \([0-9.]*\) s.*/\1/p'; }
tuned=(env MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824)
rounds=()
for ((i = 0; i < repeats; ++i)); do
  ours=$("${bin}" "${args[@]}" | step)
  peer=$("${peer_python}" benchmarks/danet_peer.py "${args[@]}" | step)
  winograd=$("${bin}" "${args[@]}" --cpu_convolution=winograd | step)
  ours_kept=$("${bin}" "${args[@]}" --retain_host_memory | step)
  peer_kept=$("${tuned[@]}" "${peer_python}" benchmarks/danet_peer.py "${args[@]}" | step)
  winograd_kept=$("${bin}" "${args[@]}" --retain_host_memory --cpu_convolution=winograd | step)
  echo "round $((i + 1)): glibc defaults: ours ${ours} s, python ${peer} s, winograd" \
    "${winograd} s; keeping freed memory: ours ${ours_kept} s, python ${peer_kept} s," \
    "winograd ${winograd_kept} s"
  rounds+=("${ours},${peer},${winograd},${ours_kept},${peer_kept},${winograd_kept}")
done
PYTHONPATH=benchmarks "${peer_python}" - "${rounds[@]}" <<'PY'
import sys
from paired_ratios import step_table
step_table(sys.argv[1:], [
    ("glibc malloc defaults", 0, 1, "(like for like, as the peer runs by default)"),
    ("both keep freed memory", 3, 4, "(like for like, as //tools:train runs)"),
    ("winograd, glibc defaults", 2, 1, "(ours with cpu_convolution WINOGRAD)"),
    ("winograd, both keep", 5, 4, "(ours with cpu_convolution WINOGRAD)")])
PY
echo "ours with activation checkpointing (compare peak RSS with the lines above):"
"${bin}" "${args[@]}" --checkpointing
