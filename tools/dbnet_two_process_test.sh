#!/usr/bin/env bash
# DBNet end to end through the launcher: two processes, SyncBatchNorm, the bucketed strategy,
# activation checkpointing, distributed evaluation, checkpoints and TensorBoard images, for a
# few steps on the testdata ICDAR2015 sample; then the eval and infer tools on the result; then
# the training again over the shared-memory backend with the timeline on.
set -euo pipefail
source tools/testing/expect.sh
config=testdata/configs/dbnet_smoke.pbtxt
out="${TEST_TMPDIR}/dbnet"
log="${TEST_TMPDIR}/log.txt"
tools/launch --nproc_per_node=2 --master_port=0 -- tools/train --config="${config}" \
  --override="checkpoint { output_dir: \"${out}\" }" 2>&1 | tee "${log}"
expect_grep "SyncBatchNorm: 24 normalisation layers synchronised over 2 ranks" "${log}"
expect_grep "activation checkpointing: backbone.layer3, backbone.layer4" "${log}"
expect_grep "\[rank 0\]: step 3/3" "${log}"
# Every step saw text: the probability loss is not zero.
if grep -q "loss_prob 0.000 " "${log}"; then echo "a step saw no text"; exit 1; fi
expect_grep "\[rank 0\]: eval at step 3: hmean" "${log}"
test -f "${out}/checkpoint_3.pt"
test -f "${out}/checkpoint_2.pt"
test -f "${out}/metrics.jsonl"
# Prediction images went to TensorBoard.
expect_grep "eval/prediction_0" "${out}"/tensorboard/events.out.tfevents.*

# The eval and infer tools on the checkpoint just written.
tools/eval --config="${config}" --checkpoint="${out}/checkpoint_3.pt" \
  --output_dir="${TEST_TMPDIR}/eval" | tee "${TEST_TMPDIR}/eval.log"
expect_grep "hmean" "${TEST_TMPDIR}/eval.log"
test -f "${TEST_TMPDIR}/eval/res_img_1.txt"
test -f "${TEST_TMPDIR}/eval/img_1.png"
tools/infer --config="${config}" --checkpoint="${out}/checkpoint_3.pt" \
  --images=testdata/icdar2015/ch4_training_images --output_dir="${TEST_TMPDIR}/infer"
expect_eq "3" "$(ls "${TEST_TMPDIR}"/infer/res_img_*.txt | wc -l)" "files ${TEST_TMPDIR}/infer/res_img_*.txt"
expect_eq "3" "$(ls "${TEST_TMPDIR}"/infer/img_*.png | wc -l)" "files ${TEST_TMPDIR}/infer/img_*.png"
# The same run over the shared-memory backend with the timeline on: every rank writes a trace.
shm_out="${TEST_TMPDIR}/dbnet_shm"
tools/launch --nproc_per_node=2 --master_port=0 -- tools/train --config="${config}" \
  --override="checkpoint { output_dir: \"${shm_out}\" } distributed { backend: SHM }
              logging { trace { start_step: 1 num_steps: 2 } }" 2>&1 | tee "${TEST_TMPDIR}/shm.log"
expect_grep "\[rank 0\]: step 3/3" "${TEST_TMPDIR}/shm.log"
for rank in 0 1; do
  expect_grep '"bucket 0 allreduce"' "${shm_out}/trace_rank${rank}.json"
done
echo "PASS"
