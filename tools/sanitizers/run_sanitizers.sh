#!/usr/bin/env bash
# Sanitizer runs, each in its own output base so the main build stays cached (every action is
# rebuilt with the sanitizer flags: the first run of the whole suite takes as long as a cold
# build, ~20 min on an idle 2-core machine, and 2-3x longer to test).
#
#   bash tools/sanitizers/run_sanitizers.sh asan  [--BAZEL_FLAG...] [TARGETS...]
#                                       # ASan + UBSan; default //...
#   bash tools/sanitizers/run_sanitizers.sh tsan                 # TSan on the data loader
#
# asan: --config=asan --config=ubsan (AddressSanitizer with LeakSanitizer, and
# UndefinedBehaviorSanitizer, both aborting on the first report) over our code; LibTorch,
# protobuf, OpenCV and the system libraries are not instrumented, so ASan checks our code and
# the memory it hands to them. Options and suppressions: tools/sanitizers/sanitizer_defaults.cc.
#
# tsan: ThreadSanitizer needs every library that synchronises the threads to be instrumented;
# LibTorch is not (its thread pools and autograd engine threads would show false races), so
# TSan runs only the tests whose threads are ours: the data loader's workers
# (//data/loader:loader_test). The gradient reducer's hooks run on LibTorch's autograd threads
# and are not covered by TSan.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode="${1:-asan}"
shift || true
case "$mode" in
  asan)
    flags=() targets=()
    for arg in "$@"; do
      if [[ "$arg" == --* ]]; then flags+=("$arg"); else targets+=("$arg"); fi
    done
    # Default: the tests `bazel test //...` runs (manual ones left out), listed by the main
    # build's server. This one has its own output base, so it would take the main build's
    # bazel-<workspace> symlink (which leads to /usr through @system) for source packages.
    if [[ ${#targets[@]} -eq 0 ]]; then
      mapfile -t targets < <(bazel query 'tests(//...) except attr(tags, manual, //...)' 2>/dev/null)
      [[ ${#targets[@]} -gt 0 ]] || { echo "run_sanitizers.sh: bazel query found no tests" >&2; exit 1; }
    fi
    # --symlink_prefix=/: leave the main build's bazel-* symlinks alone.
    exec bazel --output_base="$HOME/.cache/vision-bazel-asan" test --config=asan --config=ubsan \
      --symlink_prefix=/ --keep_going "${flags[@]}" "${targets[@]}"
    ;;
  tsan)
    exec bazel --output_base="$HOME/.cache/vision-bazel-tsan" test --config=tsan --symlink_prefix=/ \
      //data/loader:loader_test
    ;;
  *)
    echo "usage: $0 asan [TARGETS...] | tsan" >&2
    exit 2
    ;;
esac
