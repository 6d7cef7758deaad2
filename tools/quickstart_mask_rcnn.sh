#!/usr/bin/env bash
# The Mask R-CNN quick start: installs what is missing, builds the tools, generates the
# synthetic COCO dataset if absent, and trains a ResNet-18-FPN Mask R-CNN on CPU with two
# processes through the launcher (progress on the console, COCO box and mask AP on the
# held-out split, checkpoints in runs/mask_rcnn_quickstart), then draws predictions.
# Extra arguments go to the trainer, e.g. --override='train { max_steps: 100 }'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
bazel build //tools:train //tools:launch //tools:make_synthetic_coco //tools:eval
bin="$(bazel info bazel-bin)"

data=data_cache/synthetic_coco
if [[ ! -f "${data}/.complete" ]]; then
  rm -rf "${data}"
  "${bin}/data/synthetic/coco/make_synthetic_coco" --output_dir="${data}" \
    --num_train=800 --num_val=100 --size=192 --seed=1
  touch "${data}/.complete"
fi

config=models/mask_rcnn/configs/quickstart.pbtxt
"${bin}/distributed/launch/launch" --nproc_per_node=2 -- \
  "${bin}/tools/train" --config="${config}" "$@"

# Predicted masks and boxes (green) over the ground truth (red) for a handful of held-out images.
"${bin}/tools/eval" --config="${config}" --checkpoint=runs/mask_rcnn_quickstart/best.pt \
  --output_dir=runs/mask_rcnn_quickstart/predictions --max_images=8 "$@"
