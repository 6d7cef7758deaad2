#!/usr/bin/env bash
# Builds the libFuzzer targets of //tools/fuzz with clang (ASan + UBSan, --config=fuzz) in a
# separate output base, so the main build stays cached, and runs each for a bounded time.
#
#   bash tools/fuzz/run_fuzzers.sh [SECONDS_PER_TARGET] [TARGET...]   # explore (random seed)
#   bash tools/fuzz/run_fuzzers.sh --ci [TARGET...]                     # CI: reproducible
#
# Exploring: SECONDS_PER_TARGET defaults to 10; run longer by hand, e.g.
# `bash tools/fuzz/run_fuzzers.sh 600 torch_pickle`. Each run draws a new random seed, so it
# may find what earlier runs did not.
#
# --ci (what .ci/run does): every target starts from the stored inputs only (a fresh corpus
# directory), with libFuzzer's seed fixed at 1 and a fixed number of inputs per target (about
# 10 s each on an idle 2-core machine, 2.5 min for the 8), so the step tests the same inputs
# everywhere and a red CI run reproduces with this same command. New findings come from exploring runs.
#
# Each target starts from its
# stored inputs (testdata/fuzz/<target>/ and the seeds named in tools/fuzz/BUILD.bazel) and
# keeps what it finds in $VISION_FUZZ_DIR/corpus/<target> (default ~/.cache/vision-fuzz), so
# later runs continue from there. A crash, leak, timeout or out-of-memory input is written to
# $VISION_FUZZ_DIR/artifacts/<target>/ and the script fails; copy the input to
# testdata/fuzz/<target>/regression_<what>.<ext>, fix the bug, and the target's
# *_fuzz_test replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/../.."

ci=0
if [[ "${1:-}" == "--ci" ]]; then
  ci=1
  shift
  seconds=0
else
  seconds="${1:-10}"
  shift || true
fi
all_targets=(config_loader icdar2015_gt coco_json cityscapes_label image_decode rle torch_state_dict torch_pickle)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${all_targets[@]}")

# Seed directories besides testdata/fuzz/<target>/ (libFuzzer reads them recursively).
declare -A seeds=(
  [config_loader]="testdata/configs"
  [icdar2015_gt]="testdata/icdar2015"
  [coco_json]="testdata/coco/annotations testdata/coco/bad"
  [cityscapes_label]="testdata/cityscapes"
  [image_decode]="testdata/cityscapes testdata/icdar2015"
  [rle]=""
  [torch_state_dict]=""
  [torch_pickle]=""
)

command -v clang >/dev/null || { echo "run_fuzzers.sh: clang is missing (apt-get install clang)" >&2; exit 1; }
# Inputs per target in --ci mode (about 10 s each on an idle 2-core machine, torch_pickle 76 s).
declare -A ci_runs=(
  # Every plugin's options are parsed since 2026-12-07 (//tools:plugin_options_protos links
  # them whole; before, the linker had dropped them): 1,333 inputs/s idle, about 350 under load.
  [config_loader]=20000
  [icdar2015_gt]=250000
  [coco_json]=10000
  [cityscapes_label]=1000000
  [image_decode]=500000
  [rle]=120000
  [torch_state_dict]=2000
  [torch_pickle]=120000
)

work="${VISION_FUZZ_DIR:-$HOME/.cache/vision-fuzz}"
if [[ $ci -eq 1 ]]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/vision-fuzz-ci.XXXXXX")"
fi
output_base="${VISION_FUZZ_OUTPUT_BASE:-$HOME/.cache/vision-bazel-fuzz}"
bazel --output_base="$output_base" build --config=fuzz --symlink_prefix=/ \
  $(printf ' //tools/fuzz:%s_fuzzer' "${targets[@]}")
bin="$(bazel --output_base="$output_base" info --config=fuzz bazel-bin 2>/dev/null)/tools/fuzz"

status=0
for target in "${targets[@]}"; do
  mkdir -p "$work/corpus/$target" "$work/artifacts/$target"
  log="$work/artifacts/$target/last_run.log"
  if [[ $ci -eq 1 ]]; then
    budget=(-seed=1 -runs="${ci_runs[$target]}")
    echo "=== $target: ${ci_runs[$target]} inputs, seed 1"
  else
    budget=(-max_total_time="$seconds")
    echo "=== $target: ${seconds}s"
  fi
  # -rss_limit_mb / -malloc_limit_mb: an input that makes the code allocate more than 2 GB is a
  # finding (hostile sizes must fail before allocating). -timeout: one input over 10 s is a hang.
  if ! ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" "$bin/${target}_fuzzer" \
      "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -max_len=262144 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$target/" \
      "$work/corpus/$target" "testdata/fuzz/$target" ${seeds[$target]} >"$log" 2>&1; then
    echo "!!! $target: finding, see $log and $work/artifacts/$target/"
    tail -n 40 "$log"
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|cov: " \
    "$log" | tail -n 4 || true
done
# A CI run keeps its corpus and logs only when they show a finding.
if [[ $ci -eq 1 && $status -eq 0 ]]; then
  rm -rf "$work"
fi
exit "$status"
