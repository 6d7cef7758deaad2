# Sourced by the shell tests (sh_test deps: //tools/testing:expect), after `set -euo pipefail`:
#
#   source tools/testing/expect.sh
#
# so that no test exits non-zero without saying what it expected and what it saw: the expect_*
# checks print both, and a command that fails under `set -e` outside them is named with its
# file, line and exit status by the ERR trap below.

set -E  # the trap also covers functions
trap '_expect_on_error "$?" "${BASH_SOURCE[0]}" "${LINENO}" "${BASH_COMMAND}"' ERR

_expect_on_error() {
  # Failures inside $(...) are judged by the check that uses the value.
  ((BASH_SUBSHELL == 0)) || return 0
  echo "FAIL: $2:$3: expected '$4' to succeed, it exited $1" >&2
}

# fail <message...>: prints the message and exits 1.
fail() {
  trap - ERR
  echo "FAIL: $*" >&2
  exit 1
}

# expect_eq <expected> <seen> <what>
expect_eq() {
  [[ "$1" == "$2" ]] || fail "$3: expected '$1', saw '$2'"
}

# expect_true <what> <test command...>: e.g. expect_true "the log exists" test -s "${log}".
expect_true() {
  local what="$1"
  shift
  "$@" || fail "${what}: expected '$*' to hold, it did not"
}

# expect_grep [-E|-F|-x ...] <pattern> <file>...: a file has a line matching the pattern; else
# prints the pattern and each file's last 40 lines.
expect_grep() {
  local flags=()
  while [[ "$1" == -* ]]; do
    flags+=("$1")
    shift
  done
  local pattern="$1" file
  shift
  if ! grep -q "${flags[@]}" -- "${pattern}" "$@" 2>/dev/null; then
    trap - ERR
    echo "FAIL: expected a line matching '${pattern}' in $*; there is none." >&2
    for file in "$@"; do
      if [[ -f "${file}" ]]; then
        echo "--- the last 40 lines of ${file}:" >&2
        tail -n 40 "${file}" >&2
      else
        echo "--- ${file} does not exist" >&2
      fi
    done
    exit 1
  fi
}

# expect_no_grep [-E] <pattern> <file>: no line matches.
expect_no_grep() {
  local flags=()
  while [[ "$1" == -* ]]; do
    flags+=("$1")
    shift
  done
  local pattern="$1" file="$2" line
  if line=$(grep -m1 "${flags[@]}" -- "${pattern}" "${file}"); then
    fail "expected no line matching '${pattern}' in ${file}, saw: ${line}"
  fi
}
