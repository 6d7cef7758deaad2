#!/usr/bin/env bash
# DBNet-ResNet-18 forward+backward step time on CPU (one thread), ours against the same
# network written in Python PyTorch, in one command:
#   bash benchmarks/dbnet_step.sh [--size=640 --batch=2 --steps=3]
# Prints three comparisons: as shipped (our trainer keeps freed host memory for reuse,
# core/host_memory.h; Python with glibc's defaults), both with glibc's defaults, and both
# keeping freed memory (Python through MALLOC_*_ environment variables).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
bazel build -c opt //models/dbnet:activation_memory_benchmark >/tmp/dbnet_step_build.log 2>&1 ||
  { cat /tmp/dbnet_step_build.log; exit 1; }
args=(--size=640 --batch=2 --steps=3 "$@")
echo "config: DBNet-ResNet-18, inner channels 256, ${args[*]}, 1 intra-op thread"
bin="$(bazel info -c opt bazel-bin)/models/dbnet/activation_memory_benchmark"
step() { sed -n 's/.*step \([0-9.]*\) s.*/\1/p'; }
# Ours as //tools:train runs (freed host memory kept for reuse, core/host_memory.h) and with
# glibc's defaults; Python as it comes, and with the same malloc settings through the
# environment, so the difference the allocator makes is visible on both sides.
ours=$("${bin}" "${args[@]}" | step)
ours_default=$("${bin}" "${args[@]}" --retain_host_memory=false | step)
peer=$("${peer_python}" benchmarks/dbnet_peer.py "${args[@]}" | step)
peer_tuned=$(MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 \
  "${peer_python}" benchmarks/dbnet_peer.py "${args[@]}" | step)
"${peer_python}" - "${ours}" "${ours_default}" "${peer}" "${peer_tuned}" <<'PY'
import sys
ours, ours_default, peer, peer_tuned = map(float, sys.argv[1:])
print(f"step time (s)               ours   python   ours/python")
print(f"as shipped               {ours:7.3f}  {peer:7.3f}   {ours / peer:.2f}   "
      "(ours keeps freed host memory, python default malloc)")
print(f"glibc malloc defaults    {ours_default:7.3f}  {peer:7.3f}   {ours_default / peer:.2f}")
print(f"both keep freed memory   {ours:7.3f}  {peer_tuned:7.3f}   {ours / peer_tuned:.2f}")
PY
