#!/usr/bin/env bash
# DBNet-ResNet-18 forward+backward step time on CPU (one thread), ours against the same
# network written in Python PyTorch, in one command:
#   bash benchmarks/dbnet_step.sh [--size=640 --batch=2 --steps=3]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build -c opt //models/dbnet:activation_memory_benchmark >/tmp/dbnet_step_build.log 2>&1 ||
  { cat /tmp/dbnet_step_build.log; exit 1; }
args=(--size=640 --batch=2 --steps=3 "$@")
echo "config: DBNet-ResNet-18, inner channels 256, ${args[*]}, 1 intra-op thread"
ours=$("$(bazel info -c opt bazel-bin)/models/dbnet/activation_memory_benchmark" "${args[@]}")
peer=$(/usr/bin/python3 benchmarks/dbnet_peer.py "${args[@]}")
echo "ours: ${ours}"
echo "${peer}"
o=$(echo "${ours}" | sed -n 's/.*step \([0-9.]*\) s/\1/p')
p=$(echo "${peer}" | sed -n 's/.*step \([0-9.]*\) s/\1/p')
echo "step time ratio ours/python: $(/usr/bin/python3 -c "print(f'{${o}/${p}:.2f}')")"
