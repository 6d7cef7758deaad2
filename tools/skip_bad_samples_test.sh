#!/usr/bin/env bash
# loader { on_bad_sample: SKIP } at batch size 1 through the trainer on two processes: the bad
# sample's batch is filled from the next sample, training runs all its steps, and the progress
# line and the final summary count the skipped sample; with the default
# max_bad_sample_fraction (1%) one bad image in a rank's four is too many, and training stops
# naming it. Then tools/eval over the same images under SKIP: the bad one left out.
set -euo pipefail
source tools/testing/expect.sh
config=testdata/configs/dbnet_smoke.pbtxt
data="${TEST_TMPDIR}/data"
mkdir -p "${data}/ch4_training_images" "${data}/ch4_training_localization_transcription_gt"
# Seven good images (the three of testdata, copied) and one that does not decode: four per rank.
i=1
for copy in a b c; do
  for n in 1 2 10; do
    [[ ${i} -le 7 ]] || break
    cp testdata/icdar2015/ch4_training_images/img_${n}.jpg "${data}/ch4_training_images/img_${i}.jpg"
    cp testdata/icdar2015/ch4_training_localization_transcription_gt/gt_img_${n}.txt \
      "${data}/ch4_training_localization_transcription_gt/gt_img_${i}.txt"
    i=$((i + 1))
  done
done
cp testdata/icdar2015/bad/undecodable/images/img_1.jpg "${data}/ch4_training_images/img_8.jpg"
cp testdata/icdar2015/bad/undecodable/gt/gt_img_1.txt \
  "${data}/ch4_training_localization_transcription_gt/gt_img_8.txt"

train() {  # train <log> <extra override>...
  local log="$1"
  shift
  tools/launch --nproc_per_node=2 --master_port=0 -- tools/train --config="${config}" \
    --override="train_data { dataset { options { [type.googleapis.com/vision.data.datasets.ICDAR2015Options] { root: \"${data}\" } } } }" \
    --override="train_data { loader { on_bad_sample: SKIP } }" \
    --override="train { max_steps: 4 }" \
    --override="checkpoint { output_dir: \"${TEST_TMPDIR}/$(basename "${log}" .log)\" every_n_steps: 4 }" \
    "$@" >"${log}" 2>&1
}

# One epoch of 4 steps (4 images per rank, batch 1): every image is seen once.
train "${TEST_TMPDIR}/skip.log" --override="train_data { loader { max_bad_sample_fraction: 0.5 } }"
cat "${TEST_TMPDIR}/skip.log"
expect_grep "warning: skipping bad sample [0-9]* of epoch 0: .*img_8.jpg" "${TEST_TMPDIR}/skip.log"
expect_grep "^\[rank 0\]: step 4/4 .*  skipped 1 bad sample$" "${TEST_TMPDIR}/skip.log"
expect_grep "^\[rank 0\]: trained 4 steps in .*  skipped 1 bad sample$" "${TEST_TMPDIR}/skip.log"

# tools/eval honours eval_data.loader's on_bad_sample as the trainer's evaluation does (it used
# to build its own loader options and fail), and evaluation never refills: the seven good
# images get one result file each, the bad one none, none is scored twice.
tools/eval --config="${config}" --checkpoint="${TEST_TMPDIR}/skip/checkpoint_4.pt" \
  --output_dir="${TEST_TMPDIR}/eval" --max_images=0 \
  --override="eval_data { dataset { options { [type.googleapis.com/vision.data.datasets.ICDAR2015Options] { root: \"${data}\" split: \"train\" } } } loader { on_bad_sample: SKIP max_bad_sample_fraction: 0.5 batch_size: 2 } }" \
  >"${TEST_TMPDIR}/eval.log" 2>&1 || fail "tools/eval under on_bad_sample: SKIP failed: $(tail -5 "${TEST_TMPDIR}/eval.log")"
cat "${TEST_TMPDIR}/eval.log"
expect_grep "warning: skipping bad sample [0-9]* of epoch 0: .*img_8.jpg" "${TEST_TMPDIR}/eval.log"
expect_eq 7 "$(find "${TEST_TMPDIR}/eval" -name 'res_img_*.txt' | wc -l)" "result files of the good images"
expect_true "no result file for the bad image" test ! -e "${TEST_TMPDIR}/eval/res_img_8.txt"

# The default share: the rank with the bad image stops, naming it; the launcher fails the job.
if train "${TEST_TMPDIR}/too_many.log"; then
  cat "${TEST_TMPDIR}/too_many.log"
  echo "training went on with 1 bad sample of 4 under max_bad_sample_fraction 0.01"
  exit 1
fi
cat "${TEST_TMPDIR}/too_many.log"
expect_grep "1 of the 4 samples of this rank's share of epoch 0 are bad, more than loader.max_bad_sample_fraction (0.01)" \
  "${TEST_TMPDIR}/too_many.log"
expect_grep "sample [0-9]*: .*img_8.jpg" "${TEST_TMPDIR}/too_many.log"
echo "PASS"
