#!/usr/bin/env bash
# Peak memory of a DBNet-ResNet-18 training step at 640x640 (batch 2) without and with
# activation checkpointing of the backbone stages, each in its own process:
#   bash benchmarks/activation_checkpointing.sh [--size=640 --batch=2]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
bazel build -c opt //models/dbnet:activation_memory_benchmark >/tmp/activation_build.log 2>&1 ||
  { cat /tmp/activation_build.log; exit 1; }
bin="$(bazel info -c opt bazel-bin)/models/dbnet/activation_memory_benchmark"
plain=$("${bin}" "$@")
checkpointed=$("${bin}" --checkpoint=layer1,layer2,layer3,layer4 "$@")
echo "${plain}"
echo "${checkpointed}"
a=$(echo "${plain}" | sed -n 's/.*peak RSS \([0-9]*\) MiB (\([0-9]*\) MiB before.*/\1 \2/p')
b=$(echo "${checkpointed}" | sed -n 's/.*peak RSS \([0-9]*\) MiB (\([0-9]*\) MiB before.*/\1 \2/p')
"${peer_python}" -c "
a, a0 = map(float, '${a}'.split()); b, b0 = map(float, '${b}'.split())
print(f'step memory (peak minus before): {a - a0:.0f} MiB plain, {b - b0:.0f} MiB checkpointed: '
      f'{(1 - (b - b0) / (a - a0)) * 100:.0f}% less')"
