#!/usr/bin/env bash
# One optimizer step on CPU, ours (engine/optim/multi_tensor.h: the FOR_LOOP, FOREACH and FUSED
# implementations of optimizer.implementation) against torch.optim (foreach=False,
# foreach=True, fused=True), in one command:
#   bash benchmarks/optimizer_step.sh [--threads=1,2 --optimizers=sgd,adamw --rounds=5
#                                      --repeats=5 --warmup=1 --seed=0]
# Both sides step ResNet-50's parameter list (161 tensors, 25.6M float32 values; weight decay
# on the 2+-dimensional weights only) with the same seeded values and gradients: SGD lr 0.1,
# momentum 0.9, weight decay 1e-4; Adam lr 1e-3, weight decay 1e-4; AdamW lr 1e-3, weight
# decay 0.05. Per thread count (the same on both sides) it runs --rounds interleaved rounds,
# each one process per side (ours first in odd rounds, torch.optim first in even ones) timing
# --repeats steps of every implementation after --warmup. It prints, per implementation, the
# median of the per-round ratios ours/torch.optim (each taken within one round, so both sides
# saw the same load) with their spread, then the medians in ms, then the sum of the parameters
# after every step on both sides, which should agree to float rounding.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
threads=1,2
optimizers=sgd,adamw
rounds=5
repeats=5
warmup=1
seed=0
for arg in "$@"; do
  case "${arg}" in
    --threads=*) threads="${arg#*=}" ;;
    --optimizers=*) optimizers="${arg#*=}" ;;
    --rounds=*) rounds="${arg#*=}" ;;
    --repeats=*) repeats="${arg#*=}" ;;
    --warmup=*) warmup="${arg#*=}" ;;
    --seed=*) seed="${arg#*=}" ;;
    *) echo "unknown argument ${arg}" >&2; exit 2 ;;
  esac
done
bazel build -c opt //engine/optim:optimizer_step_benchmark >/tmp/optimizer_step_build.log 2>&1 ||
  { cat /tmp/optimizer_step_build.log; exit 1; }
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/engine/optim/optimizer_step_benchmark"
work="$(mktemp -d /tmp/optimizer_step.XXXXXX)"
trap 'rm -rf "${work}"' EXIT
IFS=, read -ra counts <<<"${threads}"
for n in "${counts[@]}"; do
  common=(--threads="${n}" --optimizers="${optimizers}" --implementations=for_loop,foreach,fused
          --repeats="${repeats}" --warmup="${warmup}" --seed="${seed}")
  for ((round = 1; round <= rounds; ++round)); do
    run_ours() { "${bin}" "${common[@]}" >"${work}/ours_${n}_${round}"; }
    run_peer() {
      "${peer_python}" -W ignore benchmarks/optimizer_step_peer.py "${common[@]}" \
        >"${work}/peer_${n}_${round}"
    }
    if ((round % 2)); then run_ours; run_peer; else run_peer; run_ours; fi
  done
done
"${peer_python}" - "${work}" "${threads}" "${rounds}" "${repeats}" "${warmup}" "${seed}" <<'PY'
import re
import statistics
import sys

sys.path.insert(0, "benchmarks")
from paired_ratios import spread

work, threads, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
repeats, warmup, seed = sys.argv[4:7]


def read(path):
    results, params = {}, None
    for line in open(path):
        m = re.match(r"result (\S+) (\S+) ms (\S+) check (\S+)", line)
        if m:
            results[(m.group(1), m.group(2))] = (float(m.group(3)), m.group(4))
        elif line.startswith("params"):
            params = " ".join(line.split()[:5])
    return results, params


print(f"config: ResNet-50 parameter list; {rounds} interleaved rounds per thread count, each "
      f"timing {repeats} steps after {warmup} per side and implementation; seed {seed}")
print(f"{'threads':8}{'optimizer':10}{'implementation':16}"
      f"{'ours/torch.optim: median, min-max, 90% interval':50}{'ours ms':>9}{'torch ms':>10}")
checks = []
for n in threads:
    per = [(read(f"{work}/ours_{n}_{r}"), read(f"{work}/peer_{n}_{r}"))
           for r in range(1, rounds + 1)]
    for (_, ours_params), (_, peer_params) in per:
        if ours_params != peer_params:
            sys.exit(f"the sides differ: ours '{ours_params}', torch.optim '{peer_params}'")
    for key in per[0][0][0]:
        ratios = [ours[0][key][0] / peer[0][key][0] for ours, peer in per]
        ours_ms = statistics.median(ours[0][key][0] for ours, _ in per)
        peer_ms = statistics.median(peer[0][key][0] for _, peer in per)
        print(f"{n:8}{key[0]:10}{key[1]:16}{spread(ratios):50}{ours_ms:9.1f}{peer_ms:10.1f}")
        checks.append(f"  threads {n} {key[0]} {key[1]}: ours {per[0][0][0][key][1]} "
                      f"torch.optim {per[0][1][0][key][1]}")
print(f"sum of the parameters after {int(warmup) + int(repeats)} steps (first round):")
print("\n".join(checks))
PY
