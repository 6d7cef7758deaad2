#!/usr/bin/env bash
# 2-rank bucketed runs of comm_benchmark with tracing on; trace_test.py parses both ranks' files.
# Arguments (from BUILD.bazel): <venv python3> <trace_test.py> <comm_benchmark>.
set -euo pipefail
source tools/testing/expect.sh
python=$1 check=$2 bench=$3
# Gloo, then the shared-memory backend (whose collectives complete through their own futures).
for backend in gloo shm; do
  out="${TEST_TMPDIR}/traces_${backend}"
  mkdir -p "${out}"
  "${bench}" --configs=bucketed,allreduce --worlds=2 --steps=2 --warmup=1 --trace_steps=3 \
    --batch=2 --image_size=16 --bucket_cap_mb=1 --backend="${backend}" --trace_dir="${out}"
  "${python}" "${check}" "${out}" 3
done
