#!/usr/bin/env bash
# Mask R-CNN end to end through the launcher on a tiny synthetic COCO set:
#  1. data parallelism: two processes with one image each (of different sizes; one set has an
#     image without objects, so a rank has no positive RoI and its mask head gets no target)
#     train to the same weights as one process accumulating the same two images per step;
#  2. two processes with bf16 autocast, gradient accumulation and clipping, then the eval tool
#     (COCO box and mask AP, the results JSON) and the infer tool (masks drawn) on the result.
# Arguments (from BUILD.bazel): <venv python3>.
set -euo pipefail
source tools/testing/expect.sh
python="$1"
config=models/mask_rcnn/testdata/tiny_synthetic.pbtxt
data="${TEST_TMPDIR}/coco"
# Seed 4 with half the images empty: train images 0 and 1 (step 1) have objects, image 3
# (rank 1 at step 2) has none.
data/synthetic/coco/make_synthetic_coco --output_dir="${data}" --num_train=4 --num_val=4 \
  --size=96 --seed=4 --empty_fraction=0.5 --max_objects=3
"${python}" - "${data}/annotations/instances_train2017.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
per_image = {i["id"]: 0 for i in d["images"]}
for a in d["annotations"]:
    if not a.get("iscrowd"):
        per_image[a["image_id"]] += 1
counts = [per_image[i["id"]] for i in d["images"]]
print("objects per training image:", counts)
assert 0 in counts and any(c > 0 for c in counts), "the test needs an image without objects"
PY
root="train_data { dataset { options { [type.googleapis.com/vision.data.datasets.CocoOptions] { root: \"${data}\" } } } } eval_data { dataset { options { [type.googleapis.com/vision.data.datasets.CocoOptions] { root: \"${data}\" } } } }"

run() {  # <processes> <output dir> <extra override>
  tools/launch --nproc_per_node="$1" --master_port=0 -- tools/train \
    --config="${config}" --override="${root}" \
    --override="checkpoint { output_dir: \"$2\" }" --override="$3" 2>&1 | tee "$2.log"
}

# 1. Two ranks = one rank accumulating the same images.
run 1 "${TEST_TMPDIR}/one" "train { gradient_accumulation_steps: 2 }"
run 2 "${TEST_TMPDIR}/two" ""
expect_grep "\[rank 0\]: step 2/2" "${TEST_TMPDIR}/two.log"
"${python}" - "${TEST_TMPDIR}/one" "${TEST_TMPDIR}/two" <<'PY'
import sys, torch
load = lambda run, step: dict(torch.jit.load(f"{run}/checkpoint_{step}.pt", map_location="cpu").model.named_parameters())
pa, pb = load(sys.argv[1], 2), load(sys.argv[2], 2)
# Training moved the weights, so equality below is not the trivial one.
before = load(sys.argv[1], 1)
moved = max(((pa[k] - before[k]).norm() / before[k].norm().clamp_min(1e-12)).item() for k in pa)
print(f"largest relative change of a parameter in step 2: {moved:.2e}")
assert moved > 1e-4, moved
assert pa.keys() == pb.keys() and len(pa) > 40, (len(pa), len(pb))
worst, where = 0.0, ""
for k in pa:
    d = ((pa[k] - pb[k]).norm() / pa[k].norm().clamp_min(1e-12)).item()
    if d > worst:
        worst, where = d, k
print(f"largest relative difference of a parameter: {worst:.2e} ({where})")
# Float sums in another order (two ranks' all-reduce against one rank's accumulation).
assert worst < 1e-4, worst
PY

# 2. bf16 autocast, accumulation and clipping on two processes, then eval and infer.
out="${TEST_TMPDIR}/amp"
run 2 "${out}" "mixed_precision { enabled: true dtype: BFLOAT16 } train { gradient_accumulation_steps: 2 clip_grad_norm: 1.0 max_steps: 2 }"
expect_grep "\[rank 0\]: step 2/2" "${out}.log"
expect_grep "segm_AP" "${out}.log"
tools/eval --config="${config}" --override="${root}" --override="checkpoint { output_dir: \"${out}\" }" --checkpoint="${out}/checkpoint_2.pt" \
  --output_dir="${TEST_TMPDIR}/eval" 2>&1 | tee "${TEST_TMPDIR}/eval.log"
expect_grep "segm_AP50" "${TEST_TMPDIR}/eval.log"
test -s "${TEST_TMPDIR}/eval/coco_results.json"
tools/infer --config="${config}" --override="${root}" --override="checkpoint { output_dir: \"${out}\" }" --checkpoint="${out}/checkpoint_2.pt" \
  --images="${data}/val2017" --output_dir="${TEST_TMPDIR}/infer" 2>&1 | tee "${TEST_TMPDIR}/infer.log"
expect_eq "4" "$(ls "${TEST_TMPDIR}"/infer/*.png | wc -l)" "files ${TEST_TMPDIR}/infer/*.png"
echo "PASS"
