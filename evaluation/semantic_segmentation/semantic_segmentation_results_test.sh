#!/usr/bin/env bash
# Runs semantic_segmentation_results_test.py under the project's venv python (cityscapesScripts).
# Arguments (from BUILD.bazel): <venv python3> <the .py> <write_golden_results> <testdata dir>.
set -euo pipefail
source tools/testing/expect.sh
exec "$1" "$2" "$3" "$4" "${TEST_TMPDIR}"
