#!/usr/bin/env bash
# One DANet training step (forward, three cross-entropy losses, backward, SGD) on CPU, ours
# (//models/danet:danet_step_benchmark) against the same network written in Python PyTorch
# (benchmarks/danet_peer.py), same sizes and intra-op threads, in one command:
#   bash benchmarks/danet_step.sh [--repeats=3] [--depth=18 --height=128 --width=128 --batch=4
#                                 --steps=5 --threads=1]
# The defaults are the quick start's (dilated ResNet-18, 128x128 crops, 4 images per process);
# the paper's sizes are --depth=101 --height=768 --width=768 --batch=1 (minutes per step on CPU).
# The two sides run alternately --repeats times, and the median of each side's median step is
# compared, so that load from other users of a shared machine falls on both. Then ours once more
# with activation checkpointing (backbone.layer3/4 and both attention modules): peak resident
# memory and step time with and without. A third column times ours with --cpu_convolution=
# winograd (TrainPipelineConfig.cpu_convolution WINOGRAD: the undilated 3x3 stride-1
# convolutions by Winograd F(4x4, 3x3), models/ops/winograd_conv.h), in the same rounds.
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
bin="$(bazel info bazel-bin)/models/danet/danet_step_benchmark"
step() { tee /dev/stderr | sed -n 's/.*median step \([0-9.]*\) s.*/\1/p'; }
ours=()
peer=()
winograd=()
for ((i = 0; i < repeats; ++i)); do
  ours+=("$("${bin}" "${args[@]}" | step)")
  peer+=("$("${peer_python}" benchmarks/danet_peer.py "${args[@]}" | step)")
  winograd+=("$("${bin}" "${args[@]}" --cpu_convolution=winograd | step)")
done
"${peer_python}" - "${ours[*]}" "${peer[*]}" "${winograd[*]}" <<'PY'
import statistics
import sys
ours, peer, winograd = (statistics.median(map(float, a.split())) for a in sys.argv[1:4])
print(f"median step over repeats: ours {ours:.4f} s, python {peer:.4f} s, ours/python {ours / peer:.2f}")
print(f"ours with cpu_convolution WINOGRAD {winograd:.4f} s, ours/python {winograd / peer:.2f}")
PY
echo "ours with activation checkpointing (compare peak RSS with the lines above):"
"${bin}" "${args[@]}" --checkpointing
