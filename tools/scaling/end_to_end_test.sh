#!/usr/bin/env bash
# tools/scaling end to end on the tiny DBNet: 1 and 2 processes, 1 warm-up and 2 timed steps
# each; the table on the console, scaling.json with both rows, scaling.png, each run's traces.
# Nothing here depends on how fast the machine is.
set -euo pipefail
source tools/testing/expect.sh
out="${TEST_TMPDIR}/scaling"
log="${TEST_TMPDIR}/log.txt"
tools/scaling/scaling --config=testdata/configs/dbnet_smoke.pbtxt --nproc=1,2 --steps=2 \
  --warmup_steps=1 --output_dir="${out}" 2>&1 | tee "${log}"

# The table: the baseline row at 1.00x and 100%, the 2-process row with a hidden share.
expect_grep "speed-up and efficiency against 1 process;" "${log}"
# On the CPU the last column (the CUDA allocator's peak) is "-".
expect_grep -E "^ +1 +[0-9.]+ +[0-9.]+ +1\.00x +100% +[0-9.]+( +[0-9.-]+){6} +- +[0-9]+ +-$" "${log}"
expect_grep -E "^ +2 +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9]+% +[0-9.]+( +[0-9.-]+){6} +[0-9]+% +[0-9]+ +-$" "${log}"

json="${out}/scaling.json"
expect_true "${json} exists" test -s "${json}"
expect_eq 2 "$(grep -c '"processes":' "${json}")" 'rows ("processes":) in scaling.json'
expect_grep '"processes": 1,' "${json}"
expect_grep '"processes": 2,' "${json}"
expect_grep -E '"hidden_communication_share": (0|1|0\.[0-9]+)(e-?[0-9]+)?,' "${json}"
expect_grep -E '"peak_rss_mib_rank0": [0-9.]+' "${json}"
expect_grep '"peak_cuda_mib_rank0": null' "${json}"
expect_eq 2 "$(grep -c '"traced_steps": 2,' "${json}")" 'rows with "traced_steps": 2'
expect_eq '211PNG' "$(head -c 4 "${out}/scaling.png" | od -An -c | tr -d ' ')" \
  "the first bytes of scaling.png"
for f in nproc_1/trace_rank0.json nproc_2/trace_rank0.json nproc_2/trace_rank1.json \
  nproc_2/config.pbtxt nproc_2/log.txt; do
  expect_true "${out}/${f} exists" test -s "${out}/${f}"
done
# The timed runs evaluate nothing and resume nothing.
expect_no_grep "eval at step" "${out}/nproc_2/log.txt"
expect_no_grep "resumed from" "${out}/nproc_2/log.txt"
expect_eq "" "$(find "${out}" -name '*.partial-*')" "leftover partial files"
echo "PASS"
