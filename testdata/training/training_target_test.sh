#!/usr/bin/env bash
# A training target in `bazel run`'s environment: started from its runfiles tree, with
# BUILD_WORKSPACE_DIRECTORY set. The config comes from runfiles; its data root
# (testdata/icdar2015) and output directory (runs/dbnet_smoke) mean the workspace; arguments
# after the target reach the trainer through the launcher.
set -euo pipefail
source tools/testing/expect.sh
runfiles_root="${PWD}"
workspace="${TEST_TMPDIR}/workspace"
mkdir -p "${workspace}/testdata"
ln -s "${runfiles_root}/testdata/icdar2015" "${workspace}/testdata/icdar2015"
log="${TEST_TMPDIR}/log.txt"

BUILD_WORKSPACE_DIRECTORY="${workspace}" testdata/training/train_dbnet_smoke \
  --override='train { max_steps: 2 }' 2>&1 | tee "${log}"

out="${workspace}/runs/dbnet_smoke"
# Two ranks ran (the launcher), for the 2 steps the override asked instead of the config's 3.
expect_grep "over 2 ranks" "${log}"
expect_grep "\[rank 0\]: step 2/2" "${log}"
test -f "${out}/checkpoint_2.pt"
test ! -e "${out}/checkpoint_3.pt"
test -f "${out}/metrics.jsonl"
ls "${out}"/tensorboard/events.out.tfevents.* > /dev/null
# Nothing landed in the runfiles tree the process started from.
test ! -e "${runfiles_root}/runs"
echo "PASS"
