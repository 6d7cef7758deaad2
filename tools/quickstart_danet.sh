#!/usr/bin/env bash
# The DANet quick start: installs what is missing, builds the tools, generates the synthetic
# Cityscapes dataset if absent, and trains a dilated ResNet-18 DANet on CPU with two processes
# through the launcher (progress on the console, mIoU on the held-out val split, checkpoints in
# runs/quickstart_danet); then evaluates the best checkpoint, writing labelIds and colour
# result files and drawings for a few val images to runs/quickstart_danet/predictions.
# Extra arguments go to the trainer and the evaluator, e.g. --override='train { max_steps: 100 }'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/quickstart_lib.sh

run_quickstart danet runs/quickstart_danet make_synthetic_cityscapes data_cache/synthetic_cityscapes \
  --num_train=400 --num_val=50 --width=256 --height=128 --seed=1 -- "$@"
