#!/usr/bin/env bash
# Engine overhead per step, ours against a plain Python PyTorch loop, in one command:
#   bash benchmarks/engine_overhead.sh [--steps=400 --batch=8 --workers=1]
# Same tiny model, data, batch, optimizer, schedule and clipping; one intra-op thread each.
# Overhead = full step time - the model's own forward/backward/optimizer time on a fixed batch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
bazel build -c opt //engine/testing:overhead_benchmark >/tmp/engine_overhead_build.log 2>&1 ||
  { cat /tmp/engine_overhead_build.log; exit 1; }
ours=$("$(bazel info -c opt bazel-bin)/engine/testing/overhead_benchmark" "$@")
peer=$("${peer_python}" benchmarks/engine_overhead.py "$@" | tr '\r' '\n' | tail -n 1)
echo "${ours}"
echo "${peer}"
o=$(echo "${ours}" | sed -n 's/.*overhead \([-0-9.]*\) ms/\1/p')
p=$(echo "${peer}" | sed -n 's/.*overhead \([-0-9.]*\) ms/\1/p')
echo "overhead ratio ours/python: $("${peer_python}" -c "print(f'{${o}/${p}:.2f}')")"
