#!/usr/bin/env bash
# inspect_data writes one PNG per sample: the augmented image with its texts drawn, then the
# four DBNet targets side by side (so 5 tiles wide), for the train split; eval without targets.
set -euo pipefail
source tools/testing/expect.sh
root='options { [type.googleapis.com/vision.data.datasets.ICDAR2015Options] { root: "testdata/icdar2015" } }'
out="${TEST_TMPDIR}/inspect"
tools/inspect_data --config=models/dbnet/configs/quickstart.pbtxt --num=2 --output_dir="${out}/train" \
  --override="train_data { dataset { ${root} } }" | tee "${TEST_TMPDIR}/train.log"
tools/inspect_data --config=models/dbnet/configs/quickstart.pbtxt --num=3 --split=eval \
  --output_dir="${out}/eval" --override="eval_data { dataset { ${root} } }" | tee "${TEST_TMPDIR}/eval.log"
expect_eq "2" "$(ls "${out}/train"/*.png | wc -l)" "files ${out}/train/*.png"
expect_eq "$(ls testdata/icdar2015/ch4_test_images | wc -l)" "$(ls "${out}/eval"/*.png | wc -l)" "files ${out}/eval/*.png"
expect_grep "4 targets" "${TEST_TMPDIR}/train.log"
expect_grep "0 targets" "${TEST_TMPDIR}/eval.log"
# 256x256 crops: image + 4 target maps side by side = 1280 wide (PNG IHDR width at bytes 16-19).
width=$(od -An -tu1 -j16 -N4 "$(ls "${out}/train"/*.png | head -n 1)" | awk '{print $1*16777216+$2*65536+$3*256+$4}')
[[ "${width}" -eq 1280 ]] || { echo "unexpected width ${width}"; exit 1; }

# Data-only configs (no model, so no targets): COCO objects with polygon and RLE masks, and a
# Cityscapes label map. The tiny COCO sample has 4 images (one without objects) and 6
# objects; Cityscapes 3 train images, 16x8 scaled x4.
tools/inspect_data --config=testdata/configs/inspect_coco.pbtxt --num=10 \
  --output_dir="${out}/coco" | tee "${TEST_TMPDIR}/coco.log"
expect_eq "4" "$(ls "${out}/coco"/*.png | wc -l)" "files ${out}/coco/*.png"
expect_eq "4" "$(grep -c "0 targets" "${TEST_TMPDIR}/coco.log")" "lines with 0 targets in ${TEST_TMPDIR}/coco.log"
objects=$(sed -n 's/.*texts, \([0-9]*\) objects.*/\1/p' "${TEST_TMPDIR}/coco.log" | awk '{n += $1} END {print n}')
[[ "${objects}" -eq 6 ]] || { echo "expected 6 objects, saw ${objects}"; exit 1; }
tools/inspect_data --config=testdata/configs/inspect_cityscapes.pbtxt --num=10 \
  --output_dir="${out}/cityscapes" | tee "${TEST_TMPDIR}/cityscapes.log"
expect_eq "3" "$(ls "${out}/cityscapes"/*.png | wc -l)" "files ${out}/cityscapes/*.png"
width=$(od -An -tu1 -j16 -N4 "$(ls "${out}/cityscapes"/*.png | head -n 1)" | awk '{print $1*16777216+$2*65536+$3*256+$4}')
[[ "${width}" -eq 64 ]] || { echo "unexpected Cityscapes width ${width}"; exit 1; }

# A run that fails half-way (the second image is a truncated JPEG) leaves nothing behind: no
# output directory with the first drawing in it, and no partial directory beside it.
partial='options { [type.googleapis.com/vision.data.datasets.ICDAR2015Options] { root: "testdata/icdar2015/bad/partial" image_dir: "images" gt_dir: "gt" } }'
if tools/inspect_data --config=models/dbnet/configs/quickstart.pbtxt --num=2 --split=eval \
    --output_dir="${out}/partial" --override="eval_data { dataset { ${partial} } }" \
    >"${TEST_TMPDIR}/partial.log" 2>&1; then
  echo "inspect_data succeeded on a truncated image"; cat "${TEST_TMPDIR}/partial.log"; exit 1
fi
grep -q "bad/partial/images/img_2.jpg: the JPEG file is truncated" "${TEST_TMPDIR}/partial.log" ||
  { echo "no error naming the truncated image:"; cat "${TEST_TMPDIR}/partial.log"; exit 1; }
[[ ! -e "${out}/partial" ]] || { echo "a failed run left ${out}/partial"; exit 1; }
if ls -d "${out}"/partial.partial-* 2>/dev/null; then echo "a failed run left its partial directory"; exit 1; fi
# Nothing partial beside the successful runs either.
if ls -d "${out}"/*.partial-* 2>/dev/null; then echo "partial directories were left"; exit 1; fi
echo "PASS"
