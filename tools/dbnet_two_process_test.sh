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
# Low thresholds, so that the 3-step model finds texts to write and draw.
low='model { options { [type.googleapis.com/vision.models.dbnet.DBNetOptions] {
  post_process { binary_threshold: 0.05 box_threshold: 0.05 } } } }'
tools/infer --config="${config}" --checkpoint="${out}/checkpoint_3.pt" --override="${low}" \
  --images=testdata/icdar2015/ch4_training_images --output_dir="${TEST_TMPDIR}/infer" \
  | tee "${TEST_TMPDIR}/infer.log"
expect_grep -E "^  texts: [1-9]" "${TEST_TMPDIR}/infer.log"
expect_eq "3" "$(ls "${TEST_TMPDIR}"/infer/res_img_*.txt | wc -l)" "files ${TEST_TMPDIR}/infer/res_img_*.txt"
expect_eq "3" "$(ls "${TEST_TMPDIR}"/infer/img_*.png | wc -l)" "files ${TEST_TMPDIR}/infer/img_*.png"
# Inference sharded over two processes: each image once, the same files byte for byte, one
# summary over both processes' images; --benchmark's figures.
tools/launch --nproc_per_node=2 --master_port=0 -- tools/infer --config="${config}" \
  --checkpoint="${out}/checkpoint_3.pt" --override="${low}" \
  --images=testdata/icdar2015/ch4_training_images --output_dir="${TEST_TMPDIR}/infer2" --benchmark 2>&1 | tee "${TEST_TMPDIR}/infer2.log"
expect_eq "$(cd "${TEST_TMPDIR}/infer" && ls)" "$(cd "${TEST_TMPDIR}/infer2" && ls)" \
  "files of 2-process inference against 1-process"
for f in "${TEST_TMPDIR}"/infer/*; do
  cmp "${f}" "${TEST_TMPDIR}/infer2/$(basename "${f}")" || fail "$(basename "${f}") differs between 1 and 2 processes"
done
expect_grep -x "\[rank 0\]:   3 images" "${TEST_TMPDIR}/infer2.log"
expect_eq "$(grep -E "^  texts: " "${TEST_TMPDIR}/infer.log")" \
  "$(sed -n 's/^\[rank 0\]: //p' "${TEST_TMPDIR}/infer2.log" | grep -E "^  texts: ")" \
  "texts found by 1 and by 2 processes"
expect_grep "(2 processes)" "${TEST_TMPDIR}/infer2.log"
# 3 images over 2 processes, one at a time: 2 + 1, the first of each a warm-up, so 1 timed image.
expect_grep -E "benchmark: 1 images after a warm-up batch per process, [0-9.]+ images/s over 2 processes .* median [0-9.]+ ms, p95 [0-9.]+ ms" "${TEST_TMPDIR}/infer2.log"
# Batches of images of one size: a folder of two 32x24 and three 64x48 images, 5 at a time, is
# predicted as two batches (the 32x24 pair, the warm-up of --benchmark, then the three 64x48
# images: 3 timed; one padded batch of 5 would leave none after the warm-up) and gives the
# files of one image at a time byte for byte.
mixed="${TEST_TMPDIR}/mixed"
mkdir -p "${mixed}"
cp testdata/icdar2015/ch4_training_images/*.jpg "${mixed}/"
cp testdata/coco/images/000000000002.png testdata/coco/images/000000000005.png "${mixed}/"
for batch in 1 5; do
  tools/infer --config="${config}" --checkpoint="${out}/checkpoint_3.pt" \
    --override="${low} eval_data { loader { batch_size: ${batch} } }" --images="${mixed}" \
    --output_dir="${TEST_TMPDIR}/mixed_${batch}" --benchmark | tee "${TEST_TMPDIR}/mixed_${batch}.log"
done
expect_grep -x "  5 images" "${TEST_TMPDIR}/mixed_5.log"
expect_grep "benchmark: 3 images after a warm-up batch per process" "${TEST_TMPDIR}/mixed_5.log"
expect_grep "benchmark: 4 images after a warm-up batch per process" "${TEST_TMPDIR}/mixed_1.log"
expect_eq "$(cd "${TEST_TMPDIR}/mixed_1" && ls)" "$(cd "${TEST_TMPDIR}/mixed_5" && ls)" \
  "files of inference 5 images at a time against one at a time"
for f in "${TEST_TMPDIR}"/mixed_1/*; do
  cmp "${f}" "${TEST_TMPDIR}/mixed_5/$(basename "${f}")" ||
    fail "$(basename "${f}") differs between batches of 5 and of 1"
done
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
