#!/usr/bin/env bash
# The Mask R-CNN quick start: installs what is missing, generates the synthetic COCO dataset if
# absent, and trains a ResNet-18-FPN Mask R-CNN on CPU with two processes through its training
# target, //models/mask_rcnn:train_quickstart (progress on the console, COCO box and mask AP on
# the held-out split, checkpoints in runs/mask_rcnn_quickstart), then draws predictions.
# Extra arguments go to the trainer, e.g. --override='train { max_steps: 100 }'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
# One build for everything below, so the `bazel run`s only start what is built.
bazel build //models/mask_rcnn:train_quickstart //tools:make_synthetic_coco //tools:eval

data=data_cache/synthetic_coco
if [[ ! -f "${data}/.complete" ]]; then
  rm -rf "${data}"
  bazel run //tools:make_synthetic_coco -- --output_dir="${PWD}/${data}" \
    --num_train=800 --num_val=100 --size=192 --seed=1
  touch "${data}/.complete"
fi

# The config's data root and output directory are relative: under `bazel run` they mean this
# directory (BUILD_WORKSPACE_DIRECTORY), as --config does for //tools:eval.
bazel run //models/mask_rcnn:train_quickstart -- "$@"

# Predicted masks and boxes (green) over the ground truth (red) for a handful of held-out images.
bazel run //tools:eval -- --config=models/mask_rcnn/configs/quickstart.pbtxt \
  --checkpoint=runs/mask_rcnn_quickstart/best.pt \
  --output_dir=runs/mask_rcnn_quickstart/predictions --max_images=8 "$@"
