#!/usr/bin/env bash
# Recipe equivalence (models/mask_rcnn/RECIPE.md, "Trajectory test"): the shipped COCO recipe,
# run by its training binary, against trajectory_reference.py, torchvision's detection training
# loop (references/detection train.py + engine.py) around torchvision 0.26's own MaskRCNN, from
# the same initial weights on the same pixels with the same random draws, compared at every step.
#
# What the trainer runs is configs/coco_resnet50_fpn_1x.pbtxt with only these changes, through a
# config whose base: is the shipped one (a recipe over its base replaces repeated fields;
# --override would append to them):
#   - device "cpu" (no GPU here) and mixed precision off: [TV] trains in float32 (RECIPE.md M10)
#     and so does the reference;
#   - sizes: backbone ResNet18 for ResNet50 (its options kept: frozen BatchNorm, stem and layer1
#     frozen), fpn_channels 32, representation_size 128, mask head [16, 16, 16, 16]: the
#     recipe's widths (256, 1024, 4 x 256) take several seconds a step on these 2 CPU cores;
#     num_classes, anchors, every sampler, matcher and NMS setting stay the recipe's;
#   - data: a tiny COCO-layout set of 4 training images (160x120 ... 176x128 PNG, made by the
#     reference), in order (shuffle: false), 1 worker; Resize to a shorter side of 96 (not 800);
#     HorizontalFlip left out (its draw is not replayed), Normalize, Resize and PadToDivisor
#     kept; the evaluation at the end on 1 validation image;
#   - global batch 4 (4 images x 1 process, then 2 x 2 processes through //tools:launch), so the
#     linear scaling rule gives 0.02 x 4 / 16 = 0.005, the reference's lr;
#   - length: max_steps 20, warmup_steps 6 (from 1000) and milestones [12, 17] (from [60000,
#     80000]), so that the 20 steps cover the warmup's first steps and both drops;
#   - intra_op_threads 1 (the reference's), a log record and a checkpoint at every step.
#
# Two comparisons (trajectory_reference.py; RECIPE.md has the figures they bound):
#   stepwise: each reference step starts from our weights after the previous step (its momentum
#     its own) and rank 0's generator from the state our previous checkpoint saved (rank 1's is
#     the reference's own, from the same start): rank 0's generator state after the step must
#     equal ours exactly (the samplers drew as often); lr of every parameter group and the logged
#     lr relative 1e-12, their weight decay, momentum, dampening and nesterov exactly, the
#     frozen tensors unchanged; the five losses and their sum 1e-5, the gradient norm 1e-5, the
#     whole update 1e-3 and each tensor's 1e-2. Step 1 also runs from the generator state that
#     torchvision's training transform would leave, to show the draws matter;
#   free running: the reference's own 20 steps from the initial weights and generator state;
#     ours may differ from it at most 5 x as much as a second reference run from initial
#     weights moved by one float32 rounding does (the noise floor).
# Arguments (from BUILD.bazel): <venv python3> <trajectory_reference.py> <trainer>
#   <trajectory_inputs> <launcher> <configs/coco_resnet50_fpn_1x.pbtxt>
#   <models/testing/trajectory_common.py>
set -euo pipefail
source tools/testing/expect.sh
source models/testing/trajectory_run.sh
python="$1"
reference="$2"
trainer="$3"
inputs="$4"
launcher="$5"
shipped="$(pwd)/$6"
common="$(cd "$(dirname "$7")" && pwd)"
t="${TEST_TMPDIR}"
steps=20
size=96
fpn_channels=32
representation_size=128
mask_head_channels=16,16,16,16

"${python}" "${reference}" make_data --out="${t}/data"

coco='[type.googleapis.com/vision.data.datasets.CocoOptions]'
resize="augmentations {
    type: \"Resize\"
    options {
      [type.googleapis.com/vision.data.augmentations.ResizeOptions] {
        mode: SHORTER_SIDE size: ${size} max_size: 1333 rounding: FLOOR
      }
    }
  }"
cat >"${t}/recipe.pbtxt" <<EOF
base: "${shipped}"
device: "cpu"
model {
  options {
    [type.googleapis.com/vision.models.mask_rcnn.MaskRCNNOptions] {
      backbone { type: "ResNet18" }
      fpn_channels: ${fpn_channels}
      roi_heads {
        representation_size: ${representation_size}
        mask_head_channels: [${mask_head_channels}]
      }
    }
  }
}
train_data {
  dataset { options { ${coco} { root: "${t}/data" } } }
  augmentations { type: "Normalize" }
  ${resize}
  augmentations { type: "PadToDivisor" }
  loader { num_workers: 1 shuffle: false }
}
eval_data {
  dataset { options { ${coco} { root: "${t}/data" } } }
  augmentations { type: "Normalize" }
  ${resize}
  augmentations { type: "PadToDivisor" }
  loader { num_workers: 1 }
}
lr_schedule {
  options {
    [type.googleapis.com/vision.engine.schedules.MultiStepOptions] { milestones: [12, 17] }
  }
  warmup_steps: 6
}
train { max_steps: ${steps} intra_op_threads: 1 }
mixed_precision { enabled: false }
logging { every_n_steps: 1 }
EOF

# The initial weights and generator state, and the 4 samples as our loader makes them
# (models/testing/trajectory_inputs_main.cc).
mkdir -p "${t}/inputs"
"${inputs}" --config="${t}/recipe.pbtxt" --output_dir="${t}/inputs" >/dev/null

# run <processes> <output dir>: the trainer at a global batch of 4 (trajectory_run.sh).
run() {
  trajectory_run "$1" "$2"
  expect_grep "global batch 4 = $((4 / $1)) per process x $1 process" "$2.log"
}

# compare <processes> <output dir> [more flags]
compare() {
  "${python}" "${reference}" compare --common="${common}" --data="${t}/data" \
    --inputs="${t}/inputs" --run="$2" --chunks="$1" --steps="${steps}" --base_lr=0.005 \
    --warmup_steps=6 --milestones=12,17 --size="${size}" --fpn_channels="${fpn_channels}" \
    --representation_size="${representation_size}" --mask_head_channels="${mask_head_channels}" \
    --lr_rtol=1e-12 --stepwise_rtol=1e-5 --grad_rtol=1e-5 --update_rtol=1e-3 \
    --tensor_update_rtol=1e-2 --free_factor=5 "${@:3}" | tee "$2.compare"
  expect_grep "^PASS: ${steps} steps, $1 ranks against the reference" "$2.compare"
}

run 1 "${t}/run1"
compare 1 "${t}/run1"
# ~90 MB a checkpoint (weights and momentum): the first run's go before the second's come.
rm -f "${t}"/run1/*.pt
run 2 "${t}/run2"
compare 2 "${t}/run2"
echo "PASS"
