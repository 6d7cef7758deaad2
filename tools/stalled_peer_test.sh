#!/usr/bin/env bash
# A rank that stops responding mid-training (SIGSTOP) makes the other rank fail within
# distributed.timeout_seconds with a message naming the stalled rank (the peer watchdog,
# distributed/process_group/peer_watchdog.h), and the launcher then stops the whole group, the
# stopped process included (--max_restarts=0), or restarts it and the run finishes
# (--max_restarts=1). The tiny two-process DBNet of dbnet_two_process_test.
#
# Timing on a busy machine: the job's timeout is 15 s, so the watchdog names a frozen rank after
# 11.25 s (three quarters) and Gloo's own anonymous timeout comes 3.75 s later. With 4 s the
# margins were 1 s between the two and 3 s for a starved but healthy rank's heartbeat or a
# checkpoint's fsync before a collective timed out, which a loaded machine can exceed. Waits are
# bounded (a hang fails the test, with the log) but generous: 180 s for start-up, 120 s after a
# stall.
set -euo pipefail
source tools/testing/expect.sh
config=testdata/configs/dbnet_smoke.pbtxt
timeout_seconds=15

# start <name> <max_steps> <max_restarts>: the launcher in the background; sets launcher_pid.
start() {
  local name="$1" steps="$2" restarts="$3"
  tools/launch --nproc_per_node=2 --master_port=0 --max_restarts="${restarts}" -- \
    tools/train --config="${config}" \
    --override="checkpoint { output_dir: \"${TEST_TMPDIR}/${name}\" every_n_steps: 5 }" \
    --override="train { max_steps: ${steps} }" \
    --override="distributed { timeout_seconds: ${timeout_seconds} }" \
    --override="evaluation { every_n_steps: 0 }" >"${TEST_TMPDIR}/${name}.log" 2>&1 &
  launcher_pid=$!
}

# The launcher's child with RANK=<rank>. grep -z reads the NUL-separated environment itself: the
# former `tr ... | grep -q` under pipefail failed whenever grep matched and exited before tr's
# last write (SIGPIPE, exit 141), which a busy machine's scheduling makes likely; that was the
# flake of 1 run in 3.
worker_pid() {
  local pid
  for pid in $(pgrep -P "${launcher_pid}"); do
    if grep -qxz "RANK=$1" "/proc/${pid}/environ" 2>/dev/null; then
      echo "${pid}"
      return 0
    fi
  done
  return 1
}

wait_for() {  # <pattern> <log>
  local deadline=$((SECONDS + 180))
  until grep -q "$1" "$2" 2>/dev/null; do
    if ((SECONDS > deadline)) || ! kill -0 "${launcher_pid}" 2>/dev/null; then
      echo "FAIL: expected '$1' in $2 within 180 s of the start, with the launcher running;" \
        "saw $( ((SECONDS > deadline)) && echo "none after 180 s" || echo "the launcher exit"):"
      cat "$2"
      exit 1
    fi
    sleep 0.05
  done
}

# Waits for the launcher, at most 120 s (a hang fails the test instead of timing it out).
wait_launcher() {  # <log>
  local deadline=$((SECONDS + 120))
  while kill -0 "${launcher_pid}" 2>/dev/null; do
    if ((SECONDS > deadline)); then
      echo "FAIL: expected the launcher to exit within 120 s of the stall, it is still running:"
      cat "$1"
      kill -KILL "${launcher_pid}"
      exit 1
    fi
    sleep 0.1
  done
  rc=0
  wait "${launcher_pid}" || rc=$?
}

# 1. Rank 1 stops; no restarts: rank 0 names rank 1, the launcher stops everything, exits 1.
start stop 1000 0
wait_for "^\[rank 0\]: step 2/" "${TEST_TMPDIR}/stop.log"
stalled=$(worker_pid 1) || fail "expected a worker with RANK=1 under launcher ${launcher_pid}, saw none"
kill -STOP "${stalled}"
stopped_at=${SECONDS}
wait_launcher "${TEST_TMPDIR}/stop.log"
cat "${TEST_TMPDIR}/stop.log"
echo "launcher exit ${rc}, $((SECONDS - stopped_at)) s after the SIGSTOP"
expect_eq "1" "${rc}" "the launcher exit code"
expect_grep "^\[rank 0\]: error: rank 0: rank 1 (silent for [0-9.]* s) stopped responding" \
  "${TEST_TMPDIR}/stop.log"
expect_grep "^launch: rank 0 (local_rank 0, pid [0-9]*) exited with code 75" "${TEST_TMPDIR}/stop.log"
expect_grep "worker group failed and no restarts are left" "${TEST_TMPDIR}/stop.log"
# The stopped worker is gone, not left behind stopped.
if kill -0 "${stalled}" 2>/dev/null; then
  echo "FAIL: expected the stopped rank (pid ${stalled}) to be gone, it is still there"
  exit 1
fi

# 2. Rank 0 (which hosts the store) stops; one restart: rank 1 names rank 0, the launcher
# restarts the group and the run finishes.
start restart 6 1
wait_for "^\[rank 0\]: step 2/" "${TEST_TMPDIR}/restart.log"
stalled=$(worker_pid 0) || fail "expected a worker with RANK=0 under launcher ${launcher_pid}, saw none"
kill -STOP "${stalled}"
wait_launcher "${TEST_TMPDIR}/restart.log"
cat "${TEST_TMPDIR}/restart.log"
expect_eq "0" "${rc}" "the launcher exit code"
# Which of rank 0's two signs of life lapses first (its heartbeat, or the store it hosts) is a
# matter of timing: either message names rank 0.
grep -Eq "^\[rank 1\]: error: rank 1: (the job's store at 127.0.0.1:[0-9]*, hosted by rank 0, has not answered|rank 0 \(silent for [0-9.]+ s\) stopped responding)" \
  "${TEST_TMPDIR}/restart.log"
expect_grep "^launch: restarting the local worker group (restart 1 of 1," "${TEST_TMPDIR}/restart.log"
expect_grep "^\[rank 0\]: step 6/6" "${TEST_TMPDIR}/restart.log"
if kill -0 "${stalled}" 2>/dev/null; then
  echo "FAIL: expected the stopped rank (pid ${stalled}) to be gone, it is still there"
  exit 1
fi
echo "PASS"
