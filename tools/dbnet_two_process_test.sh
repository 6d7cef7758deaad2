#!/usr/bin/env bash
# DBNet end to end through the launcher: two processes, SyncBatchNorm, the bucketed strategy,
# distributed evaluation and checkpoints, for a few steps on the testdata ICDAR2015 sample
# with the quick-start config scaled down.
set -euo pipefail
launch="distributed/launch/launch"
train="tools/train"
out="${TEST_TMPDIR}/dbnet"
log="${TEST_TMPDIR}/log.txt"
"${launch}" --nproc_per_node=2 --master_port=0 -- "${train}" \
  --config=models/dbnet/configs/quickstart.pbtxt \
  --override='train_data { dataset { options { [type.googleapis.com/vision.data.datasets.ICDAR2015Options] { root: "testdata/icdar2015" } } } }' \
  --override='eval_data { dataset { options { [type.googleapis.com/vision.data.datasets.ICDAR2015Options] { root: "testdata/icdar2015" } } } }' \
  --override='train_data { loader { batch_size: 1 } augmentations { type: "RandomCrop" options { [type.googleapis.com/vision.data.augmentations.RandomCropOptions] { width: 64 height: 64 } } } }' \
  --override='model { options { [type.googleapis.com/vision.models.dbnet.DBNetOptions] { inner_channels: 16 } } }' \
  --override='train { max_steps: 3 intra_op_threads: 1 activation_checkpointing: "backbone.layer3" activation_checkpointing: "backbone.layer4" } logging { every_n_steps: 1 } evaluation { every_n_steps: 0 }' \
  --override="checkpoint { output_dir: \"${out}\" every_n_steps: 2 }" 2>&1 | tee "${log}"
grep -q "SyncBatchNorm: 24 normalisation layers synchronised over 2 ranks" "${log}"
grep -q "\[rank 0\]: step 3/3" "${log}"
grep -q "activation checkpointing: backbone.layer3, backbone.layer4" "${log}"
grep -q "\[rank 0\]: eval at step 3: hmean" "${log}"
test -f "${out}/checkpoint_3.pt"
test -f "${out}/checkpoint_2.pt"
test -f "${out}/metrics.jsonl"
# Prediction images went to TensorBoard (PNG data inside the event file).
grep -q "eval/prediction_0" "${out}"/tensorboard/events.out.tfevents.*
echo "PASS"
