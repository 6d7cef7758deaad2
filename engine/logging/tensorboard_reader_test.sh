#!/usr/bin/env bash
# Runs tensorboard_reader_test.py under the project's venv python (the tensorboard package).
# Arguments (from BUILD.bazel): <venv python3> <tensorboard_reader_test.py> <writer binary>.
set -euo pipefail
source tools/testing/expect.sh
exec "$1" "$2" "$3" "${TEST_TMPDIR}"
