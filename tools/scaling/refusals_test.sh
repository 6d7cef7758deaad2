#!/usr/bin/env bash
# tools/scaling refuses what it cannot run before it starts anything: no output directory
# appears, and the message says what was wrong and what to do.
set -euo pipefail
source tools/testing/expect.sh
config=testdata/configs/dbnet_smoke.pbtxt
out="${TEST_TMPDIR}/scaling"

# refuse <expected message (grep -E)> <scaling arguments...>: exit code 1, the message, no output.
refuse() {
  local expected="$1" code=0
  shift
  tools/scaling/scaling --output_dir="${out}" "$@" >"${TEST_TMPDIR}/out.txt" 2>&1 || code=$?
  expect_eq 1 "${code}" "exit code of scaling $*"
  expect_grep "^error: " "${TEST_TMPDIR}/out.txt"
  expect_grep -E "${expected}" "${TEST_TMPDIR}/out.txt"
  expect_true "no output directory after scaling $*" test ! -e "${out}"
}

refuse 'entry 1 is 0; a run needs at least 1 process' --config="${config}" --nproc=0
refuse 'entry 2 is 0; a run needs at least 1 process' --config="${config}" --nproc=1,0
refuse "entry 2 \('x'\) is not a whole number" --config="${config}" --nproc=1,x
refuse "entry 2 \(''\) is not a whole number" --config="${config}" --nproc=1,,2
refuse '2 is given twice' --config="${config}" --nproc=2,2
refuse 'steps=0: at least 1 timed step' --config="${config}" --nproc=1 --steps=0
refuse 'config is required: the pipeline config' --nproc=1
# One process per GPU: 1024 processes are more than any machine here has GPUs.
refuse 'device "cuda" runs one process per GPU, and this machine has [0-9]+ GPUs? visible to .*: cannot run (.*, )?1024 process' \
  --config="${config}" --override='device: "cuda"' --nproc=1,1024
# Without a GPU even 1 process is refused.
if [[ ! -e /dev/nvidia0 ]]; then
  refuse 'this machine has 0 GPUs visible to .*: cannot run 1, 2 process\(es\)' \
    --config="${config}" --override='device: "cuda"' --nproc=1,2
fi
refuse 'no_train_data.pbtxt: invalid config:|^  train_data: required: the training dataset' \
  --config=tools/scaling/testdata/no_train_data.pbtxt --nproc=1
echo "PASS"
