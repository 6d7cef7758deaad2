#!/usr/bin/env bash
# Repeated fault trials: the quick start's DBNet on two processes under the launcher
# (quickstart_short.pbtxt beside this script: 30 steps, a checkpoint every 3), interrupted
# by SIGKILL to one worker at a random step; the launcher restarts the group (--max_restarts=1),
# which resumes from the newest checkpoint. Every trial must finish, and its final weights and
# logged metrics must equal those of an uninterrupted run bit for bit
# (tools/compare_training_runs.py --resumed).
#
# Modes (--mode=kill, truncate or both; both by default, --trials each):
#   kill      SIGKILL to a random rank once rank 0 has logged a random step.
#   truncate  the same, but with the whole group frozen (SIGSTOP to the launcher and the
#             workers) while the worker is killed and the newest checkpoint is cut at a random
#             byte; the restarted run must report the corrupt checkpoint and resume from the
#             one before it.
# Prints one line per trial and the tally; exits non-zero unless every trial finished
# bit-identical. Run from the repository root (a few minutes on a 2-core machine):
#   bash tools/fault_trials/fault_trials.sh [--trials=10] [--mode=both] [--seed=1]
#       [--out=/tmp/fault_trials] [--data=data_cache/synthetic_text]
set -euo pipefail

trials=10
mode=both
seed=1
out=/tmp/fault_trials
data=data_cache/synthetic_text
for arg in "$@"; do
  case "${arg}" in
    --trials=*) trials="${arg#*=}" ;;
    --mode=*) mode="${arg#*=}" ;;
    --seed=*) seed="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --data=*) data="${arg#*=}" ;;
    *) echo "fault_trials.sh: unknown argument '${arg}' (see the header of $0)" >&2; exit 2 ;;
  esac
done
case "${mode}" in
  kill) modes=(kill) ;;
  truncate) modes=(truncate) ;;
  both) modes=(kill truncate) ;;
  *) echo "fault_trials.sh: --mode must be kill, truncate or both, not '${mode}'" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
cd "${root}"
python="${VISION_VENV:-${HOME}/.cache/vision-train/venv}/bin/python"
config="${here}/quickstart_short.pbtxt"
steps=30
first_checkpoint=3

bazel build //tools:train //tools:launch //tools:make_synthetic_text >&2
train="${root}/bazel-bin/tools/train"
launch="${root}/bazel-bin/tools/launch"
if [[ ! -d "${data}/ch4_training_images" ]]; then
  echo "writing the synthetic dataset to ${data}" >&2
  bazel-bin/data/synthetic/make_synthetic_text --output_dir="${root}/${data}" >&2
fi
data="$(cd "${data}" && pwd)"

RANDOM="${seed}"
rm -rf "${out}"
mkdir -p "${out}"

# run <dir> [launcher flags...]: starts the launcher in the background; sets launcher_pid.
run() {
  local dir="$1"
  shift
  "${launch}" --nproc_per_node=2 --master_port=0 "$@" -- "${train}" --config="${config}" \
    --override="train_data { dataset { options { [type.googleapis.com/vision.data.datasets.ICDAR2015Options] { root: \"${data}\" } } } }" \
    --override="checkpoint { output_dir: \"${dir}\" }" >"${dir}.log" 2>&1 &
  launcher_pid=$!
}

# The pid of the worker with RANK=<rank> among the launcher's children.
worker_pid() {
  local rank="$1" pid
  for pid in $(pgrep -P "${launcher_pid}"); do
    if tr '\0' '\n' <"/proc/${pid}/environ" 2>/dev/null | grep -qx "RANK=${rank}"; then
      echo "${pid}"
      return 0
    fi
  done
  return 1
}

# Waits until rank 0 has logged step <step>; fails when the launcher exits first.
wait_for_step() {
  local log="$1" step="$2"
  until grep -qs "^\[rank 0\]: step ${step}/" "${log}"; do
    kill -0 "${launcher_pid}" 2>/dev/null || return 1
    sleep 0.05
  done
}

# A random integer in [lo, hi] into ${random}. $RANDOM is drawn in this shell only (bash reseeds
# it in subshells), so --seed gives the same trials every time.
random_between() {
  random=$(($1 + ((RANDOM << 15) | RANDOM) % ($2 - $1 + 1)))
}

start=$(date +%s)
echo "reference: uninterrupted run of ${steps} steps" >&2
run "${out}/reference"
wait "${launcher_pid}" || { echo "the reference run failed: ${out}/reference.log" >&2; exit 1; }

total=0
finished=0
identical=0
fell_back=0
for m in "${modes[@]}"; do
  # Distinct kill steps: after the first checkpoint in truncate mode (there must be one to cut),
  # and early enough that the run is still going when the kill lands.
  lo=1
  [[ "${m}" == truncate ]] && lo=$((first_checkpoint + 1))
  hi=$((steps - 3))
  kill_steps=($(seq "${lo}" "${hi}"))
  for ((i = ${#kill_steps[@]} - 1; i > 0; --i)); do  # Fisher-Yates shuffle
    random_between 0 "${i}"
    swap="${kill_steps[i]}"
    kill_steps[i]="${kill_steps[random]}"
    kill_steps[random]="${swap}"
  done
  for ((t = 0; t < trials; ++t)); do
    step="${kill_steps[$((t % ${#kill_steps[@]}))]}"
    victim=$((RANDOM % 2))
    dir="${out}/${m}_${t}"
    total=$((total + 1))
    run "${dir}" --max_restarts=1
    note=""
    if ! wait_for_step "${dir}.log" "${step}"; then
      note="the run ended before step ${step}"
    elif ! pid=$(worker_pid "${victim}"); then
      note="rank ${victim} not found"
    elif [[ "${m}" == kill ]]; then
      kill -KILL "${pid}"
      note="SIGKILL to rank ${victim} after step ${step}"
    else
      # Freeze the group so nothing writes a checkpoint while the newest one is cut.
      frozen=("${launcher_pid}" $(pgrep -P "${launcher_pid}"))
      kill -STOP "${frozen[@]}"
      kill -KILL "${pid}"
      newest=$(ls "${dir}"/checkpoint_*.pt | sed 's/.*checkpoint_\([0-9]*\)\.pt/\1/' | sort -n | tail -1)
      file="${dir}/checkpoint_${newest}.pt"
      size=$(stat -c %s "${file}")
      random_between 0 $((size - 1))
      cut_at="${random}"
      truncate -s "${cut_at}" "${file}"
      kill -CONT "${frozen[@]}" 2>/dev/null || true
      note="SIGKILL to rank ${victim} after step ${step}, checkpoint_${newest}.pt cut to ${cut_at} of ${size} bytes"
    fi
    rc=0
    wait "${launcher_pid}" || rc=$?
    result="FAILED (launcher exit ${rc})"
    if [[ ${rc} -eq 0 ]] && grep -q "^\[rank 0\]: step ${steps}/${steps}" "${dir}.log"; then
      finished=$((finished + 1))
      if "${python}" tools/compare_training_runs.py --resumed "${out}/reference" "${dir}" "${steps}" \
        >"${dir}.compare" 2>&1; then
        identical=$((identical + 1))
        result="finished, bit-identical"
      else
        result="finished, DIFFERENT (${dir}.compare)"
      fi
    fi
    resumed=$(grep -o "resumed from step [0-9]*" "${dir}.log" | tail -1 || true)
    resumed="${resumed:-started anew}"
    if grep -q "trying an older checkpoint" "${dir}.log"; then
      fell_back=$((fell_back + 1))
      resumed="${resumed} after reporting the cut checkpoint"
    fi
    grep -q "restarting the local worker group" "${dir}.log" || resumed="${resumed} (no restart seen)"
    echo "trial ${m} ${t}: ${note}; ${resumed}; ${result}"
  done
done
echo "tally: ${total} trials (${modes[*]}), ${finished} finished, ${identical} bit-identical to the uninterrupted run, ${fell_back} fell back from a cut checkpoint; $(($(date +%s) - start)) s"
[[ ${identical} -eq ${total} ]]
