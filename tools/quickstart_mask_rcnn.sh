#!/usr/bin/env bash
# The Mask R-CNN quick start: installs what is missing, generates the synthetic COCO dataset if
# absent, and trains a ResNet-18-FPN Mask R-CNN on CPU with two processes through its training
# target, //models/mask_rcnn:train_quickstart (progress on the console, COCO box and mask AP on
# the held-out split, checkpoints in runs/mask_rcnn_quickstart), then draws predictions.
# Extra arguments go to the trainer, e.g. --override='train { max_steps: 100 }'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/quickstart_lib.sh

run_quickstart mask_rcnn runs/mask_rcnn_quickstart make_synthetic_coco data_cache/synthetic_coco \
  --num_train=800 --num_val=100 --size=192 --seed=1 -- "$@"
