#!/usr/bin/env bash
# The DANet quick start: installs what is missing, builds the tools, generates the synthetic
# Cityscapes dataset if absent, and trains a dilated ResNet-18 DANet on CPU with two processes
# through the launcher (progress on the console, mIoU on the held-out val split, checkpoints in
# runs/quickstart_danet); then evaluates the best checkpoint, writing labelIds and colour
# result files and drawings for a few val images to runs/quickstart_danet/predictions.
# Extra arguments go to the trainer and the evaluator, e.g. --override='train { max_steps: 100 }'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
# One build for everything below, so the `bazel run`s only start what is built.
bazel build //models/danet:train_quickstart //tools:make_synthetic_cityscapes //tools:eval

data=data_cache/synthetic_cityscapes
if [[ ! -f "${data}/.complete" ]]; then
  rm -rf "${data}"
  bazel run //tools:make_synthetic_cityscapes -- --output_dir="${PWD}/${data}" \
    --num_train=400 --num_val=50 --width=256 --height=128 --seed=1
  touch "${data}/.complete"
fi

# The config's data root and output directory are relative: under `bazel run` they mean this
# directory (BUILD_WORKSPACE_DIRECTORY), as --config does for //tools:eval.
bazel run //models/danet:train_quickstart -- "$@"

bazel run //tools:eval -- --config=models/danet/configs/quickstart.pbtxt \
  --checkpoint=runs/quickstart_danet/best.pt \
  --output_dir=runs/quickstart_danet/predictions --max_images=8 "$@"
