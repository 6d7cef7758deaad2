#!/usr/bin/env bash
# The trainer under PyTorch's own launcher (torchrun, from the venv's torch 2.11) trains exactly
# as under //tools:launch: the same tiny two-process DBNet run as dbnet_two_process_test, once
# under each, must log the same losses and save the same weights, bit for bit.
# Arguments (from BUILD.bazel): <venv python3> <compare_training_runs.py>.
set -euo pipefail
source tools/testing/expect.sh
python="$1"
compare="$2"
config=testdata/configs/dbnet_smoke.pbtxt
steps=3
checkpoint() {
  echo "checkpoint { output_dir: \"$1\" every_n_steps: ${steps} keep_last: 1 keep_best: false }"
}

# torchrun's agent hosts its own store on --master_port, so it needs a port known to be free.
# Rank 0's store then cannot bind that port; LibTorch's TCPStore sees
# TORCHELASTIC_USE_AGENT_STORE=True and joins the agent's store as a client instead (it logs
# "failed to bind ... ignoring the error"), which is what makes the trainer work under torchrun.
port=$("${python}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${python}" -m torch.distributed.run --no-python --nproc_per_node=2 --master_port="${port}" \
  tools/train --config="${config}" --override="$(checkpoint "${TEST_TMPDIR}/torchrun")" \
  2>&1 | tee "${TEST_TMPDIR}/torchrun.log"
expect_grep "training ${steps} steps .* 2 ranks" "${TEST_TMPDIR}/torchrun.log"

tools/launch --nproc_per_node=2 --master_port=0 -- \
  tools/train --config="${config}" --override="$(checkpoint "${TEST_TMPDIR}/launch")" \
  2>&1 | tee "${TEST_TMPDIR}/launch.log"
expect_grep "training ${steps} steps .* 2 ranks" "${TEST_TMPDIR}/launch.log"

"${python}" "${compare}" "${TEST_TMPDIR}/torchrun" "${TEST_TMPDIR}/launch" "${steps}"
echo "PASS"
