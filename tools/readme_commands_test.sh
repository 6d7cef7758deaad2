#!/usr/bin/env bash
# The README's commands exist and run (issue: `bazel-bin/tools/launch` was named there while
# //tools:launch was an alias, so no such file was ever built):
#   1. every `bazel-bin/<dir>/<name>` the README names is built by a `bazel build` or
#      `bazel run` command the README gives (//<dir>:<name> is named in one), and is in this
#      test's runfiles as an executable (add the target to `data` of readme_commands_test);
#   2. every command line of its ```sh blocks that starts with `bazel-bin/` and takes
#      `--help`, `--list_plugins` or `--dry_run` runs: exit 0 (absl's --help exits 1 after
#      printing the flags, which is accepted when the flags were printed). `--config=...` is
#      replaced by a small config on testdata/.
# Every failure prints what was expected and what was seen.
set -uo pipefail

readme="$1"
dry_run_config="$2"
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

[[ -f "${readme}" ]] || { echo "FAIL: expected the README at '${readme}', found nothing" >&2; exit 1; }

# Labels the README builds: every //label in a `bazel build` or `bazel run` command, in blocks
# or in prose (`bazel run //tools:launch -- ...`).
# Lines are joined first: a command in prose may wrap.
built_labels=$(tr '\n' ' ' <"${readme}" |
  grep -oE 'bazel (build|run)( -c opt)?( +//[A-Za-z0-9_/.-]+(:[A-Za-z0-9_.-]+)?)+' |
  grep -oE '//[A-Za-z0-9_/.-]+(:[A-Za-z0-9_.-]+)?' | sort -u)

label_of() {  # bazel-bin/a/b/c -> //a/b:c
  local path="${1#bazel-bin/}"
  echo "//${path%/*}:${path##*/}"
}

is_built() {  # //a/b:c is named, or //a/b/c for a target named like its package
  local label="$1" package="${1%%:*}" name="${1##*:}"
  grep -qxF -- "${label}" <<<"${built_labels}" && return 0
  [[ "${package##*/}" == "${name}" ]] && grep -qxF -- "${package}" <<<"${built_labels}"
}

# 1. Paths.
checked=0
while IFS=: read -r line path; do
  checked=$((checked + 1))
  label=$(label_of "${path}")
  if ! is_built "${label}"; then
    fail "README.md:${line} names ${path}; expected a 'bazel build ${label}' (or bazel run)" \
      "in the README that makes it, saw none (the README builds: $(tr '\n' ' ' <<<"${built_labels}"))"
  fi
  if [[ ! -x "${path#bazel-bin/}" ]]; then
    fail "README.md:${line} names ${path}; expected ${label} to be an executable target" \
      "(in this test's data), saw no file '${path#bazel-bin/}' in the runfiles"
  fi
done < <(grep -noE 'bazel-bin/[A-Za-z0-9_/.-]*[A-Za-z0-9_]' "${readme}" | sort -t: -k2 -u)
if ((checked == 0)); then
  fail "expected the README to name bazel-bin/ paths, saw none (wrong file '${readme}'?)"
fi

# 2. Short commands of the ```sh blocks.
ran=0
while IFS=: read -r line command; do
  command="${command%%#*}"                                     # trailing comment
  command="${command%"${command##*[![:space:]]}"}"
  command="${command//--config=.../--config=${dry_run_config}}"
  command="${command#bazel-bin/}"
  ran=$((ran + 1))
  output=$(timeout 300 bash -c "${command}" 2>&1)
  rc=$?
  if [[ "${command}" == *--help* && ${rc} -eq 1 && "${output}" == *"Flags from"* ]]; then
    rc=0
  fi
  if ((rc != 0)); then
    fail "README.md:${line}: expected '${command}' to exit 0, saw exit ${rc}; its output ends:"
    tail -n 15 <<<"${output}" >&2
  else
    echo "ok: README.md:${line}: ${command}"
  fi
done < <(awk '/^```sh/ { inside = 1; next } /^```/ { inside = 0 } inside { print FNR ":" $0 }' \
  "${readme}" | grep -E '^[0-9]+:bazel-bin/.*(--help|--list_plugins|--dry_run)')
if ((ran < 3)); then
  fail "expected at least 3 short commands (--help, --list_plugins, --dry_run) in the README's" \
    "sh blocks, saw ${ran}"
fi

if ((failures > 0)); then
  echo "${failures} README check(s) failed" >&2
  exit 1
fi
echo "PASS: ${checked} bazel-bin paths exist and are built by README commands; ${ran} commands ran"
