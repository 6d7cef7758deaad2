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
bazel build //tools:train //tools:launch //tools:make_synthetic_cityscapes //tools:eval
bin="$(bazel info bazel-bin)"

data=data_cache/synthetic_cityscapes
if [[ ! -f "${data}/.complete" ]]; then
  rm -rf "${data}"
  "${bin}/data/synthetic/cityscapes/make_synthetic_cityscapes" --output_dir="${data}" \
    --num_train=400 --num_val=50 --width=256 --height=128 --seed=1
  touch "${data}/.complete"
fi

config=models/danet/configs/quickstart.pbtxt
# --master_port=0: a free port, so that another job on this machine does not collide.
"${bin}/distributed/launch/launch" --nproc_per_node=2 --master_port=0 -- \
  "${bin}/tools/train" --config="${config}" "$@"

"${bin}/tools/eval" --config="${config}" --checkpoint=runs/quickstart_danet/best.pt \
  --output_dir=runs/quickstart_danet/predictions --max_images=8 "$@"
