#!/usr/bin/env bash
# Writes torchvision's reference (weights and outputs, ~250 MB, so made here and not checked
# in) with testdata/make_mask_rcnn_parity.py under the project's venv, then runs the C++ side.
# Arguments (from BUILD.bazel): <venv python3> <make_mask_rcnn_parity.py> <test binary>.
set -euo pipefail
source tools/testing/expect.sh
dir="${TEST_TMPDIR}/mask_rcnn_parity"
mkdir -p "${dir}"
"$1" "$2" "${dir}"
MASK_RCNN_PARITY_DIR="${dir}" exec "$3"
