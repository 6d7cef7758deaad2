#!/usr/bin/env bash
# The dry-run test of a training target whose deps lack the backbone its config names fails,
# naming the plugin (family and type) and the target to add to deps.
set -euo pipefail
source tools/testing/expect.sh
log="${TEST_TMPDIR}/log.txt"
if "$@" > "${log}" 2>&1; then
  cat "${log}"
  echo "FAIL: the dry run of an incomplete target passed"
  exit 1
fi
cat "${log}"
target=//testdata/training:train_dbnet_smoke_without_backbone
expect_grep -F "backbone 'ResNet18' is not linked into ${target}: add \"//models/backbones:resnet\" to its deps" \
  "${log}"
# The registry's own message stays, listing what is linked.
expect_grep "Unknown backbone 'ResNet18'" "${log}"
echo "PASS"
