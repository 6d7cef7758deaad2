#!/usr/bin/env bash
# evaluation.segmentation_inference end to end: a tiny DANet trained three steps on the
# testdata Cityscapes sample and evaluated by the trainer with multi-scale, flip and
# sliding-window inference; the eval tool on its checkpoint gives the same metrics with the
# option and other ones without it; infer runs with it; a bad option stops the tool naming it.
set -euo pipefail
source tools/testing/expect.sh
config=testdata/configs/segmentation_multi_scale_eval.pbtxt
out="${TEST_TMPDIR}/run"
tools/train --config="${config}" --override="checkpoint { output_dir: \"${out}\" }" 2>&1 |
  tee "${TEST_TMPDIR}/train.log"
# The trainer's "eval at step 3: IoU/bicycle 0.0000 IoU/traffic light 0.0138 ... mIoU 0.0120"
# and the eval tool's "  IoU/traffic light 0.0138" lines, both as sorted "name=value" lines.
grep "eval at step 3:" "${TEST_TMPDIR}/train.log" | sed 's/.*eval at step 3: //' |
  sed -E 's/ ([0-9]+\.[0-9]+)( |$)/=\1\n/g' | sed -E 's/^ +//; /^$/d' | sort \
  > "${TEST_TMPDIR}/train.metrics"
metrics_of_eval() {
  grep -E '^  [A-Za-z]' "$1" | sed -E 's/^  //; s/ +([0-9]+\.[0-9]+)$/=\1/' | sort
}
expect_grep '^mIoU=' "${TEST_TMPDIR}/train.metrics"
n=$(wc -l < "${TEST_TMPDIR}/train.metrics"); expect_true "lines in ${TEST_TMPDIR}/train.metrics: expected > 20, saw ${n}" test "${n}" -gt 20

tools/eval --config="${config}" --checkpoint="${out}/checkpoint_3.pt" \
  --output_dir="${TEST_TMPDIR}/eval_out" | tee "${TEST_TMPDIR}/eval.log"
metrics_of_eval "${TEST_TMPDIR}/eval.log" > "${TEST_TMPDIR}/eval.metrics"
diff "${TEST_TMPDIR}/train.metrics" "${TEST_TMPDIR}/eval.metrics"
# Its drawings were moved into place when it finished, and nothing partial is left beside them.
n=$(find "${TEST_TMPDIR}/eval_out" -name '*.png' | wc -l); expect_true "PNGs under ${TEST_TMPDIR}/eval_out: expected >= 1, saw ${n}" test "${n}" -ge 1
if ls -d "${TEST_TMPDIR}"/*.partial-* 2>/dev/null; then echo "partial directories were left"; exit 1; fi

# The same config without the option: the model's single-scale Predict, other metrics.
sed '/segmentation_inference {/,/^  }/d' "${config}" > "${TEST_TMPDIR}/single_scale.pbtxt"
if grep -q "segmentation_inference {" "${TEST_TMPDIR}/single_scale.pbtxt"; then
  echo "the option was not removed from the config copy"; exit 1
fi
tools/eval --config="${TEST_TMPDIR}/single_scale.pbtxt" --checkpoint="${out}/checkpoint_3.pt" \
  > "${TEST_TMPDIR}/single.log"
metrics_of_eval "${TEST_TMPDIR}/single.log" > "${TEST_TMPDIR}/single.metrics"
expect_eq "$(wc -l < "${TEST_TMPDIR}/eval.metrics")" "$(wc -l < "${TEST_TMPDIR}/single.metrics")" "lines in ${TEST_TMPDIR}/single.metrics"
if diff -q "${TEST_TMPDIR}/single.metrics" "${TEST_TMPDIR}/eval.metrics"; then
  echo "multi-scale metrics equal single-scale ones: the option had no effect"; exit 1
fi

if tools/eval --config="${config}" --checkpoint="${out}/checkpoint_3.pt" \
  --override='evaluation { segmentation_inference { crop_height: 0 crop_width: 8 } }' \
  > "${TEST_TMPDIR}/bad.log" 2>&1; then
  echo "a 0 x 8 crop was accepted"; exit 1
fi
expect_grep "evaluation.segmentation_inference.crop_height: crop_height and crop_width must both be > 0" \
  "${TEST_TMPDIR}/bad.log"

tools/infer --config="${config}" --checkpoint="${out}/checkpoint_3.pt" \
  --images=testdata/cityscapes/leftImg8bit/val/frankfurt --output_dir="${TEST_TMPDIR}/infer"
n=$(find "${TEST_TMPDIR}/infer" -name '*.png' | wc -l); expect_true "PNGs under ${TEST_TMPDIR}/infer: expected >= 1, saw ${n}" test "${n}" -ge 1
echo "PASS"
