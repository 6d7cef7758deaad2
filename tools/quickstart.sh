#!/usr/bin/env bash
# The quick start: installs what is missing, generates the synthetic text dataset if absent, and
# trains DBNet-ResNet-18 on CPU with two processes through its training target,
# //models/dbnet:train_quickstart (progress on the console, evaluation on the held-out split,
# checkpoints in runs/quickstart), then draws predictions.
# Extra arguments go to the trainer, e.g. --override='train { max_steps: 100 }'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
# One build for everything below, so the `bazel run`s only start what is built.
bazel build //models/dbnet:train_quickstart //tools:make_synthetic_text //tools:eval

data=data_cache/synthetic_text
if [[ ! -f "${data}/.complete" ]]; then
  rm -rf "${data}"
  bazel run //tools:make_synthetic_text -- --output_dir="${PWD}/${data}" \
    --num_train=400 --num_test=50 --width=320 --height=320 --seed=1
  touch "${data}/.complete"
fi

# The config's data root and output directory are relative: under `bazel run` they mean this
# directory (BUILD_WORKSPACE_DIRECTORY), as --config does for //tools:eval.
bazel run //models/dbnet:train_quickstart -- "$@"

# Predictions (green) over the ground truth (red) for a handful of held-out images.
bazel run //tools:eval -- --config=models/dbnet/configs/quickstart.pbtxt \
  --checkpoint=runs/quickstart/best.pt --output_dir=runs/quickstart/predictions \
  --max_images=8 "$@"
