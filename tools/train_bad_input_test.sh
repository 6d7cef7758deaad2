#!/usr/bin/env bash
# Every kind of bad input to //tools:train: a clear error naming what and where, exit code 1,
# and nothing written.
set -uo pipefail
train=tools/train
out="${TEST_TMPDIR}/out"
failures=0

expect_error() {  # expect_error NAME EXPECTED_TEXT ARGS...
  local name="$1" expected="$2"
  shift 2
  local log="${TEST_TMPDIR}/${name}.log"
  "${train}" "$@" --override="checkpoint { output_dir: \"${out}\" }" >"${log}" 2>&1
  local code=$?
  if [[ ${code} -ne 1 ]]; then
    echo "FAIL ${name}: exit code ${code}, expected 1"; failures=$((failures + 1))
  elif ! grep -qF -- "${expected}" "${log}"; then
    echo "FAIL ${name}: output lacks '${expected}':"; cat "${log}"; failures=$((failures + 1))
  elif [[ -e "${out}" ]]; then
    echo "FAIL ${name}: ${out} was created"; failures=$((failures + 1))
  else
    echo "ok   ${name}: $(head -c 200 "${log}" | head -n 1)"
  fi
}

c=testdata/configs
expect_error malformed "${c}/malformed.pbtxt:6:6: Expected \":\"" --config=${c}/malformed.pbtxt
expect_error unknown_field "${c}/unknown_field.pbtxt:2:" --config=${c}/unknown_field.pbtxt
expect_error missing_file "cannot open config file '${c}/nope.pbtxt'" --config=${c}/nope.pbtxt
expect_error directory "is not a regular file" --config=${c}
expect_error unknown_model "Unknown model 'DBNett'; did you mean 'DBNet'?" --config=${c}/unknown_model.pbtxt
expect_error wrong_options "model: options: expected a message of type vision.models.dbnet.DBNetOptions" \
  --config=${c}/wrong_options_type.pbtxt
expect_error invalid_values "optimizer.lr: must be > 0, got -0.1" --config=${c}/invalid_values.pbtxt
expect_error missing_required "model.type: required" --config=${c}/missing_required.pbtxt
expect_error bad_override "--override #1 'optimizer { lr: }'" --config=${c}/unknown_model.pbtxt \
  --override='optimizer { lr: }'
expect_error no_config "--config is required"
# A dataset whose images and ground truth do not pair up is refused before anything is written.
orphans='options { [type.googleapis.com/vision.data.datasets.ICDAR2015Options] { root: "testdata/icdar2015/bad/orphans" image_dir: "images" gt_dir: "gt" } }'
expect_error unpaired_files "1 ground-truth (gt_img_<N>.txt) file in 'testdata/icdar2015/bad/orphans/gt' has no image" \
  --config=${c}/dbnet_smoke.pbtxt --override="train_data { dataset { ${orphans} } }"
# This machine has no GPU (CI's neither): a CUDA device is refused at start-up, naming the build.
# Where a GPU is visible the case does not apply and counts as passed.
if [[ -e /dev/nvidiactl ]]; then
  echo "skip cuda_without_gpu: this machine has a GPU"
else
  expect_error cuda_without_gpu "device \"cuda:0\": this build (LibTorch" --config=${c}/dbnet_smoke.pbtxt \
    --override='device: "cuda:0"'
fi
echo "$((12 - failures)) passed, ${failures} failed"
[[ ${failures} -eq 0 ]]
