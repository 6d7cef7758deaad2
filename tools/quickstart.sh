#!/usr/bin/env bash
# The quick start: installs what is missing, generates the synthetic text dataset if absent, and
# trains DBNet-ResNet-18 on CPU with two processes through its training target,
# //models/dbnet:train_quickstart (progress on the console, evaluation on the held-out split,
# checkpoints in runs/quickstart), then draws predictions.
# Extra arguments go to the trainer, e.g. --override='train { max_steps: 100 }'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/quickstart_lib.sh

run_quickstart dbnet runs/quickstart make_synthetic_text data_cache/synthetic_text \
  --num_train=400 --num_test=50 --width=320 --height=320 --seed=1 -- "$@"
