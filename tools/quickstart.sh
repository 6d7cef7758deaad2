#!/usr/bin/env bash
# The quick start: installs what is missing, builds the tools, generates the synthetic text
# dataset if absent, and trains DBNet-ResNet-18 on CPU with two processes through the launcher
# (progress on the console, evaluation on the held-out split, checkpoints in runs/quickstart).
# Extra arguments go to the trainer, e.g. --override='train { max_steps: 100 }'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
bazel build //tools:train //tools:launch //tools:make_synthetic_text //tools:eval
bin="$(bazel info bazel-bin)"

data=data_cache/synthetic_text
if [[ ! -f "${data}/.complete" ]]; then
  rm -rf "${data}"
  "${bin}/data/synthetic/make_synthetic_text" --output_dir="${data}" \
    --num_train=400 --num_test=50 --width=320 --height=320 --seed=1
  touch "${data}/.complete"
fi

config=models/dbnet/configs/quickstart.pbtxt
"${bin}/distributed/launch/launch" --nproc_per_node=2 -- \
  "${bin}/tools/train" --config="${config}" "$@"

# Predictions (green) over the ground truth (red) for a handful of held-out images.
"${bin}/tools/eval" --config="${config}" --checkpoint=runs/quickstart/best.pt \
  --output_dir=runs/quickstart/predictions --max_images=8 "$@"
