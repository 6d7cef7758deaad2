#!/usr/bin/env bash
# torchvision's Mask R-CNN weights through our whole evaluation path give torchvision's numbers:
# the shipped recipe's eval pipeline (CocoDataset, Normalize, Resize with torchvision's size rule
# on the float image, PadToDivisor with 0, the MaskRCNN plugin importing a torchvision state dict
# through MaskRCNNOptions.weights_path, the COCO evaluator) run by tools/eval without a
# checkpoint, against torchvision 0.26's model with its own input path
# (GeneralizedRCNNTransform) and pycocotools 2.0.11, on images that need resizing and padding
# (4:3 and 3:4 COCO shapes, several sizes in one batch, one bounded by max_size) and ground truth
# with two-decimal polygons that cross the border (testdata/eval_pipeline_reference.py).
# Arguments (from BUILD.bazel): <venv python3> <eval_pipeline_reference.py>.
set -euo pipefail
source tools/testing/expect.sh
python="$1"
reference="$2"
dir="${TEST_TMPDIR}/eval_pipeline"
mkdir -p "${dir}"
"${python}" "${reference}" make "${dir}" > "${dir}/reference.log" 2>&1 ||
  fail "the reference script failed: $(tail -20 "${dir}/reference.log")"
grep '^reference:' "${dir}/reference.log"

# The recipe as shipped, with its shorter side 800 / longer side 1333 shrunk to 96 / 160 (the
# reference's min_size / max_size) so that a CPU test runs in seconds.
recipe=models/mask_rcnn/configs/coco_resnet50_fpn_1x.pbtxt
config="${dir}/recipe.pbtxt"
expect_eq 2 "$(grep -c '^ *size: 800$' "${recipe}")" "Resize 'size: 800' lines in ${recipe}"
expect_eq 2 "$(grep -c '^ *max_size: 1333$' "${recipe}")" "Resize 'max_size: 1333' lines in ${recipe}"
sed -e 's/^\( *\)size: 800$/\1size: 96/' -e 's/^\( *\)max_size: 1333$/\1max_size: 160/' \
  "${recipe}" > "${config}"

tools/eval --config="${config}" --output_dir="${dir}/ours" --max_images=0 \
  --override='device: "cpu" cudnn_benchmark: false mixed_precision { enabled: false }' \
  --override="model { options { [type.googleapis.com/vision.models.mask_rcnn.MaskRCNNOptions] { num_classes: 3 weights_path: \"${dir}/weights.pt\" strict_weights: true } } }" \
  --override="eval_data { dataset { options { [type.googleapis.com/vision.data.datasets.CocoOptions] { root: \"${dir}/coco\" annotation_file: \"instances.json\" image_dir: \"images\" } } } loader { batch_size: 3 num_workers: 0 } }" \
  > "${dir}/ours.txt" 2>&1 || fail "tools/eval failed: $(tail -20 "${dir}/ours.txt")"
cat "${dir}/ours.txt"
# Without --checkpoint the header names the imported weights.
expect_grep -F "torchvision Mask R-CNN state dict '${dir}/weights.pt' (MaskRCNNOptions.weights_path)" "${dir}/ours.txt"
"${python}" "${reference}" compare "${dir}"

# A model that imports no weights is refused without a checkpoint, not scored at random.
if tools/eval --config="${config}" --override='device: "cpu" mixed_precision { enabled: false }' > "${dir}/refused.txt" 2>&1; then
  fail "tools/eval without --checkpoint and without imported weights succeeded; expected a refusal"
fi
expect_grep -F "imports no weights of a whole model" "${dir}/refused.txt"
echo "PASS"
