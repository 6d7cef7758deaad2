#!/usr/bin/env bash
# Recipe equivalence (models/danet/RECIPE.md, "Trajectory test"): the shipped Cityscapes recipe,
# run by its training binary, against trajectory_reference.py, the DANet authors' training loop
# (junfu1115/DANet c7a2f60) in Python, from the same initial weights on the same pixels,
# compared at every step.
#
# What the trainer runs is configs/cityscapes_resnet101.pbtxt with only these changes, through a
# config whose base: is the shipped one (a recipe over its base replaces repeated fields;
# --override would append to them):
#   - model: backbone ResNet18 for ResNet101 (its options kept: output stride 8; multi_grid
#     [1, 2] for [1, 2, 4], as ResNet-18's layer4 has 2 blocks), so the head has 512 / 4 = 128
#     channels; dropout 0 for 0.1, so that both sides are deterministic;
#   - data: a tiny Cityscapes-layout set of 4 training images, 64x64 PNG (made by the
#     reference), loaded in order (shuffle: false) by 1 worker; augmentations Normalize alone;
#     the evaluation at the end on 1 validation image at scale 1 in one 64x64 window;
#   - sizes: global batch 4 (4 images x 1 process, then 2 x 2 processes), so the linear
#     scaling rule (reference_batch_size 8) gives the head 0.1 x 4 / 8 = 0.05 and the backbone
#     0.005, the authors' --lr;
#   - length: max_steps 20, the poly schedule's N = 20 (1 iteration per epoch, 20 epochs);
#   - logging and checkpoints at every step, into the test's directory.
#
# Two comparisons (trajectory_reference.py; RECIPE.md has the figures they bound):
#   stepwise: each reference step starts from our weights and BatchNorm buffers after the
#     previous step (its momentum its own): lr of both parameter groups (and the logged lr)
#     relative 1e-12, their weight decay, momentum, dampening and nesterov exactly; the loss
#     terms and the BatchNorm buffers 1e-5; the gradient norm 1e-4, the whole update 1e-3 and
#     each tensor's 1e-2. At 1 process ours equals the reference bit for bit. At 2 processes
#     SyncBatchNorm's sums over ranks round differently and a rounding now and then flips a
#     ReLU or max-pooling choice: there the gradient norm and the updates may instead be up to
#     5 x what a second reference does from our weights moved by one float32 rounding at every
#     step (the stepwise noise floor, --stepwise_floor);
#   free running: the reference's own 20 steps from the initial weights; ours may differ from
#     it at most 5 x as much as a second reference run from initial weights moved by one
#     float32 rounding does (the noise floor).
# Arguments (from BUILD.bazel): <venv python3> <trajectory_reference.py> <trainer>
#   <trajectory_inputs> <launcher> <configs/cityscapes_resnet101.pbtxt>
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
# The Python peer the reference imports (exported by the root BUILD.bazel, data of this test);
# it imports the head from models/danet/testdata/make_danet_golden.py beside it.
peers="$(pwd)/benchmarks"
[[ -f "${peers}/danet_peer.py" && -f "${peers}/peer_step.py" &&
   -f models/danet/testdata/make_danet_golden.py ]] ||
  fail "benchmarks/danet_peer.py, peer_step.py or make_danet_golden.py is not in the runfiles"
t="${TEST_TMPDIR}"
steps=20

"${python}" "${reference}" make_data --out="${t}/data" --size=64

cityscapes='[type.googleapis.com/vision.data.datasets.CityscapesOptions]'
cat >"${t}/recipe.pbtxt" <<EOF
base: "${shipped}"
model {
  options {
    [type.googleapis.com/vision.models.danet.DANetOptions] {
      backbone {
        type: "ResNet18"
        options { [type.googleapis.com/vision.models.backbones.ResNetOptions] { multi_grid: [1, 2] } }
      }
      dropout: 0
    }
  }
}
train_data {
  dataset { options { ${cityscapes} { root: "${t}/data" } } }
  augmentations { type: "Normalize" }
  loader { num_workers: 1 shuffle: false }
}
eval_data {
  dataset { options { ${cityscapes} { root: "${t}/data" } } }
  loader { num_workers: 1 }
}
evaluation {
  segmentation_inference {
    scales: [1.0] flip: false
    crop_height: 64 crop_width: 64 stride_height: 64 stride_width: 64
  }
}
train { max_steps: ${steps} intra_op_threads: 1 }
logging { every_n_steps: 1 }
EOF

# The initial weights and the 4 samples as our loader makes them (models/testing/trajectory_inputs_main.cc).
mkdir -p "${t}/inputs"
"${inputs}" --config="${t}/recipe.pbtxt" --output_dir="${t}/inputs" >/dev/null

# run <processes> <output dir>: the trainer at a global batch of 4 (trajectory_run.sh).
run() { trajectory_run "$1" "$2"; }

# compare <processes> <output dir> [more flags]
compare() {
  "${python}" "${reference}" compare --common="${common}" --peers="${peers}" --data="${t}/data" \
    --inputs="${t}/inputs" --run="$2" --chunks="$1" --base_lr=0.005 --steps="${steps}" \
    --lr_rtol=1e-12 --stepwise_rtol=1e-5 --grad_rtol=1e-4 --update_rtol=1e-3 \
    --tensor_update_rtol=1e-2 --free_factor=5 "${@:3}" | tee "$2.compare"
  expect_grep "^PASS: ${steps} steps, $1 ranks against the reference" "$2.compare"
}

run 1 "${t}/run1"
compare 1 "${t}/run1"
# ~100 MB a checkpoint (weights and momentum): the first run's go before the second's come.
rm -f "${t}"/run1/*.pt
run 2 "${t}/run2"
expect_grep "SyncBatchNorm: .* synchronised over 2 ranks" "${t}/run2.log"
compare 2 "${t}/run2" --stepwise_floor
echo "PASS"
