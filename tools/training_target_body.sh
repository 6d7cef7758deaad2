# The body of every training target's script; tools/training.bzl writes the variables above it
# (target, workspace, trainer, config, nproc_per_node, launcher, launcher_args).
# Paths are resolved here, before anything changes directory: the trainer itself enters
# BUILD_WORKSPACE_DIRECTORY (tools/flags_util.h), so the config comes from runfiles by an
# absolute path while the data roots and output directories inside it mean the workspace.
set -euo pipefail

# The runfiles tree: beside this script (bazel run, bazel-bin/...), or that of the test or
# binary that has this target as data.
if [[ -d "$0.runfiles" ]]; then
  runfiles="$0.runfiles"
elif [[ -n "${RUNFILES_DIR:-}" ]]; then
  runfiles="${RUNFILES_DIR}"
elif [[ -n "${TEST_SRCDIR:-}" ]]; then
  runfiles="${TEST_SRCDIR}"
else
  echo "error: ${target}: no runfiles found ($0.runfiles, RUNFILES_DIR or TEST_SRCDIR):" \
    "run it with: bazel run ${target} -- [trainer flags]" >&2
  exit 1
fi
root="$(cd "${runfiles}/${workspace}" && pwd)"

train=("${root}/${trainer}" "--config=${root}/${config}")
if (( nproc_per_node > 1 )); then
  exec "${root}/${launcher}" "--nproc_per_node=${nproc_per_node}" "${launcher_args[@]}" -- \
    "${train[@]}" "$@"
fi
exec "${train[@]}" "$@"
