#!/usr/bin/env bash
# Recipe equivalence (models/dbnet/RECIPE.md, "Trajectory test"): the shipped ResNet-18 recipe,
# run by its training binary, against trajectory_reference.py, MhLiao/DB's training loop in
# Python, from the same initial weights on the same pixels, compared at every step.
#
# What the trainer runs is configs/icdar2015_resnet18.pbtxt with only these changes:
#   - data: a tiny ICDAR2015-layout set of 4 PNG images, 64x64 (made by the reference), loaded
#     in order (shuffle: false) by 1 worker; the augmentation lists replaced by Normalize alone
#     (evaluation: Normalize, PadToDivisor), through a config whose base: is the shipped one,
#     because --override appends to repeated fields;
#   - sizes: global batch 4 (4 images x 1 process, then 2 x 2 processes);
#   - length: max_epochs 20, so 20 steps of one batch each run the whole poly schedule;
#   - logging and checkpoints at every step, into the test's directory;
#   - a third run (1 process) with cpu_convolution: WINOGRAD.
# The reference gets the lr our linear scaling rule gives at 4 images (0.007 x 4 / 16, the
# recipe's D2) and DB's epochs = 19: DB trains epochs + 1 epochs (RECIPE.md D10), so its
# schedule then ends where ours does.
#
# Two comparisons (trajectory_reference.py; RECIPE.md has the figures they bound):
#   stepwise: each reference step starts from our weights and BatchNorm buffers after the
#     previous step (its momentum its own): lr of every parameter group relative 1e-12; the
#     loss terms and the BatchNorm buffers 1e-5; the gradient norm 2e-3; the whole update
#     1e-2 and each tensor's 5e-2 (DB's network is not smooth at float32 resolution: deformable
#     sampling at whole pixels, OHEM's top-k, so a step now and then differs by ~1e-3, and
#     momentum carries it on);
#   free running: the reference's own 20 steps from the initial weights; ours may differ from
#     it at most 5 x as much as a second reference run from initial weights moved by one
#     float32 rounding does (the noise floor).
# Arguments (from BUILD.bazel): <venv python3> <trajectory_reference.py> <trainer>
#   <trajectory_inputs> <launcher> <configs/icdar2015_resnet18.pbtxt>
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
# The Python peers the reference imports (exported by the root BUILD.bazel, data of this test).
peers="$(pwd)/benchmarks"
[[ -f "${peers}/dbnet_peer.py" && -f "${peers}/loader_peer.py" && -f "${peers}/peer_step.py" ]] ||
  fail "benchmarks/dbnet_peer.py, loader_peer.py and peer_step.py are not in the runfiles"
t="${TEST_TMPDIR}"
steps=20

"${python}" "${reference}" make_data --out="${t}/data" --size=64

cat >"${t}/recipe.pbtxt" <<EOF
base: "${shipped}"
train_data { augmentations { type: "Normalize" } }
eval_data { augmentations { type: "Normalize" } augmentations { type: "PadToDivisor" } }
EOF
icdar='[type.googleapis.com/vision.data.datasets.ICDAR2015Options]'
overrides=(
  --override="train_data { dataset { options { ${icdar} { root: \"${t}/data\" } } }
                           loader { num_workers: 1 shuffle: false } }"
  --override="eval_data { dataset { options { ${icdar} { root: \"${t}/data\" } } }
                          loader { num_workers: 1 } }"
  --override="train { max_epochs: ${steps} }"
  --override="logging { every_n_steps: 1 }"
)

# The initial weights and the 4 samples as our loader makes them (models/testing/trajectory_inputs_main.cc).
mkdir -p "${t}/inputs"
"${inputs}" --config="${t}/recipe.pbtxt" "${overrides[@]}" --output_dir="${t}/inputs" >/dev/null

# run <processes> <output dir>: the trainer at a global batch of 4 (trajectory_run.sh).
run() { trajectory_run "$1" "$2" "${overrides[@]}"; }

# compare <processes> <output dir>
compare() {
  "${python}" "${reference}" compare --common="${common}" --peers="${peers}" --data="${t}/data" \
    --inputs="${t}/inputs" --run="$2" --chunks="$1" --base_lr=0.00175 \
    --steps="${steps}" --db_epochs=$((steps - 1)) --lr_rtol=1e-12 --stepwise_rtol=1e-5 \
    --grad_rtol=2e-3 --update_rtol=1e-2 --tensor_update_rtol=5e-2 --free_factor=5 \
    | tee "$2.compare"
  expect_grep "^PASS: ${steps} steps, $1 ranks against the reference" "$2.compare"
}

run 1 "${t}/run1"
compare 1 "${t}/run1"
run 2 "${t}/run2"
expect_grep "SyncBatchNorm: .* synchronised over 2 ranks" "${t}/run2.log"
compare 2 "${t}/run2"
# The recipe with cpu_convolution: WINOGRAD (its 3x3 stride-1 convolutions by Winograd
# F(4x4, 3x3), models/ops/winograd_conv.h) against the same reference, same tolerances.
trajectory_run 1 "${t}/run1_winograd" "${overrides[@]}" --override="cpu_convolution: WINOGRAD"
expect_grep "cpu convolution: Winograd" "${t}/run1_winograd.log"
compare 1 "${t}/run1_winograd"
echo "PASS"
