#!/usr/bin/env bash
# A ResNet-50 Mask R-CNN checkpoint (the model's seeded initialisation, 3 classes) exported with
# --layout=torchvision loads into torchvision's maskrcnn_resnet50_fpn with strict=True, and the
# tensors equal the checkpoint's (testdata/check_torchvision.py, under the project's venv).
# Arguments (from BUILD.bazel): <venv python3> <check_torchvision.py> <export> <make_test_checkpoint>.
set -euo pipefail
source tools/testing/expect.sh
python="$1"
check="$2"
export_bin="$3"
make_checkpoint="$4"
t="${TEST_TMPDIR}"
config=tools/export/testdata/mask_rcnn_r50.pbtxt

"${make_checkpoint}" --config="${config}" --output="${t}/r50.pt" >/dev/null
for layout in torchvision native; do
  "${export_bin}" --config="${config}" --checkpoint="${t}/r50.pt" --layout="${layout}" \
    --output="${t}/${layout}.pth" >"${t}/${layout}.log"
done
expect_grep -E "^wrote 360 tensors in the torchvision layout of MaskRCNN" "${t}/torchvision.log"
"${python}" "${check}" "${t}/torchvision.pth" "${t}/native.pth" 4 >"${t}/check.log"
expect_grep -E "^PASS: 307 tensors equal ours after strict loading; 53 num_batches_tracked" \
  "${t}/check.log"
cat "${t}/check.log"
