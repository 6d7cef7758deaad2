#!/usr/bin/env bash
# Gradient communication, ours against PyTorch DDP (venv torch), side by side in one command:
#   bash benchmarks/comm_vs_ddp.sh [--steps=30 --repeats=3 --resnet_steps=8 --models=small,resnet18]
#                                  [--interleave=N] [--malloc=shipped|defaults|retain] [--op_table]
# For each model (the small conv net at 32x32, batch 8; ResNet-18 at 224x224, batch 4), the
# same network, batch, bucket size (1 MiB) and thread count (1 per rank) on CPU with Gloo, two
# ranks; each configuration's median over the repeats, then per strategy pair (ours, DDP's):
# the step-time ratio, the overhead over no communication, and the share of the communication
# hidden behind backward, 1 - (step - none) / collectives, where "collectives" is the time of
# our bucketed strategy's buckets all-reduced alone, with no model running (the same for both
# sides: what is not hidden shows up as overhead).
#
# --interleave=N: N rounds instead of --repeats; each round runs ours (one repeat of every
#   configuration, then over shared memory) and DDP, ours first in odd rounds and DDP first in
#   even ones, so that drifting load hits both sides alike. Besides the medians it prints, per
#   pair (and for no communication), the median of the N per-round ratios ours/DDP with their
#   min-max and a bootstrap 90% interval of that median.
# --malloc: shipped (default): ours keeps freed host memory as //tools:train does
#   (core/host_memory.h), DDP with glibc's defaults, as PyTorch comes; defaults: both with
#   glibc's defaults; retain: both keep freed memory (DDP through MALLOC_*_ variables). The
#   "faults" line shows what the allocator costs: page faults per step of no communication.
# --op_table: also profiles two no-communication steps of each side at world 1 (Kineto,
#   comm_benchmark --profile_dir; torch.profiler, ddp_peer.py --profile_dir) and prints
#   benchmarks/op_table.py's operator table: calls and self ms per step, ours / DDP.
#
# Adding a strategy: one line in PAIRS below ("label ours_config ddp_peer_config"). The "shm"
# row is our bucketed strategy over the shared-memory backend (its hidden share against its own
# collectives, run alone over shared memory).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
PAIRS=(
  "bucketed bucketed ddp"
  "fp16 fp16_compress ddp_fp16"
)
steps=30 repeats=3 resnet_steps=8 models=small,resnet18 interleave=0 malloc=shipped op_table=0
for arg in "$@"; do
  case "${arg}" in
    --steps=*) steps="${arg#*=}" ;;
    --repeats=*) repeats="${arg#*=}" ;;
    --resnet_steps=*) resnet_steps="${arg#*=}" ;;
    --models=*) models="${arg#*=}" ;;
    --interleave=*) interleave="${arg#*=}" ;;
    --malloc=*) malloc="${arg#*=}" ;;
    --op_table) op_table=1 ;;
    *) echo "unknown argument ${arg}; see the usage at the top of $0" >&2; exit 2 ;;
  esac
done
if ! [[ "${interleave}" =~ ^[0-9]+$ ]]; then
  echo "--interleave: a number of rounds (0: off), got ${interleave}" >&2
  exit 2
fi
source benchmarks/malloc_settings.sh
malloc_settings "${malloc}" || exit 2
# Interleaved: one repeat per side and round; otherwise one round of --repeats.
rounds=1 side_repeats="${repeats}"
if ((interleave > 0)); then rounds="${interleave}" side_repeats=1; fi
bazel build -c opt //distributed/strategies:comm_benchmark >/tmp/comm_vs_ddp_build.log 2>&1 ||
  { cat /tmp/comm_vs_ddp_build.log; exit 1; }
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/distributed/strategies/comm_benchmark"
ours_configs="none,collectives,allreduce" peer_configs="none"
for pair in "${PAIRS[@]}"; do
  read -r _ ours peer <<<"${pair}"
  ours_configs+=",${ours}" peer_configs+=",${peer}"
done
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
for model in ${models//,/ }; do
  case "${model}" in
    small) args=(--model=small --image_size=32 --batch=8 --steps="${steps}") ;;
    resnet18) args=(--model=resnet18 --image_size=224 --batch=4 --steps="${resnet_steps}") ;;
    *) echo "--models: small and/or resnet18, got ${model}" >&2; exit 2 ;;
  esac
  common=("${args[@]}" --repeats="${side_repeats}" --bucket_cap_mb=1 --threads=1 --worlds=2)
  mkdir -p "${work}/traces_${model}"
  for ((round = 1; round <= rounds; ++round)); do
    ((rounds == 1)) || echo "== ${model}: round ${round} of ${rounds}"
    # After each configuration's timed steps, 3 traced steps (of the last round; the last
    # repeat's trace is kept).
    trace=()
    ((round < rounds)) || trace=(--trace_dir="${work}/traces_${model}" --trace_steps=3)
    run_ours() {
      echo "== ${model}: ours"
      "${bin}" "${common[@]}" "${ours_malloc[@]}" --configs="${ours_configs}" "${trace[@]}" |
        tee "${work}/ours_${model}_${round}"
      # The same buckets through the shared-memory backend (distributed/shm, backend SHM).
      echo "== ${model}: ours, bucketed over shared memory"
      "${bin}" "${common[@]}" "${ours_malloc[@]}" --backend=shm --configs=collectives,bucketed |
        tee "${work}/shm_${model}_${round}"
    }
    run_peer() {
      echo "== ${model}: PyTorch DDP"
      env "${peer_malloc[@]}" "${peer_python}" benchmarks/ddp_peer.py "${common[@]}" \
        --configs="${peer_configs}" | tee "${work}/peer_${model}_${round}"
    }
    # Interleaved rounds alternate which side goes first (ours, DDP, DDP, ours, ...), so that
    # load drifting within a round does not always favour the same side.
    if ((round % 2)); then run_ours; run_peer; else run_peer; run_ours; fi
  done
  for side in ours shm peer; do cat "${work}/${side}_${model}"_* >"${work}/${side}_${model}"; done
  if ((op_table)); then
    mkdir -p "${work}/profile_ours_${model}" "${work}/profile_peer_${model}"
    profile=("${args[@]}" --steps=2 --warmup=2 --threads=1 --worlds=1 --configs=none
      --profile_steps=2)
    "${bin}" "${profile[@]}" "${ours_malloc[@]}" --profile_dir="${work}/profile_ours_${model}" \
      >/dev/null
    env "${peer_malloc[@]}" "${peer_python}" benchmarks/ddp_peer.py "${profile[@]}" \
      --profile_dir="${work}/profile_peer_${model}" >/dev/null 2>&1
    echo "== ${model}: operators of one no-communication step at world 1, ours / DDP"
    "${peer_python}" benchmarks/op_table.py --steps=2 --top=20 \
      "${work}/profile_ours_${model}/none_world1_profile_rank0.json" \
      "${work}/profile_peer_${model}/none_world1_profile_rank0.json"
  fi
done
"${peer_python}" - "${work}" "${models}" "${interleave}" "${PAIRS[@]}" <<'PY'
import statistics, sys
sys.path.insert(0, "benchmarks")
from paired_ratios import medians, spread
work, models, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
pairs = [p.split() for p in sys.argv[4:]]
for model in models:
    ours, peer = medians(f"{work}/ours_{model}"), medians(f"{work}/peer_{model}")
    ours_cpu, peer_cpu = (medians(f"{work}/ours_{model}", True),
                          medians(f"{work}/peer_{model}", True))
    coll = ours["collectives"]
    print(f"\n{model}, world 2, median ms/step: no communication ours {ours['none']:.1f}, "
          f"DDP {peer['none']:.1f}; the collectives alone {coll:.1f}; "
          f"allreduce after backward {ours['allreduce']:.1f}")
    print(f"{'strategy':<10} {'ours':>8} {'DDP':>8} {'ours/DDP':>9} {'overhead':>17} {'hidden':>15}")
    for label, o, p in pairs:
        so, sp = ours[o], peer[p]
        ho = min(1.0, max(0.0, 1 - (so - ours["none"]) / coll)) * 100
        hp = min(1.0, max(0.0, 1 - (sp - peer["none"]) / coll)) * 100
        print(f"{label:<10} {so:8.1f} {sp:8.1f} {so / sp:9.2f} "
              f"{so - ours['none']:7.1f} / {sp - peer['none']:5.1f} ms {ho:5.0f}% / {hp:3.0f}%")
    shm = medians(f"{work}/shm_{model}")
    so, sp, sc = shm["bucketed"], peer["ddp"], shm["collectives"]
    print(f"{'shm':<10} {so:8.1f} {sp:8.1f} {so / sp:9.2f} "
          f"{so - ours['none']:7.1f} / {sp - peer['none']:5.1f} ms "
          f"{min(1.0, max(0.0, 1 - (so - ours['none']) / sc)) * 100:5.0f}% / "
          f"{min(1.0, max(0.0, 1 - (sp - peer['none']) / coll)) * 100:3.0f}%   "
          f"(bucketed over shm vs DDP; its collectives alone {sc:.1f} ms, Gloo/shm {coll / sc:.2f})")
    # Rank 0's CPU time per step (all its threads) over no communication: the work a strategy
    # adds, which a busy machine's wall clock hides.
    shm_cpu = medians(f"{work}/shm_{model}", True)
    added = [f"{label} {ours_cpu[o] - ours_cpu['none']:.1f} / {peer_cpu[p] - peer_cpu['none']:.1f}"
             for label, o, p in pairs if o in ours_cpu and p in peer_cpu]
    if "bucketed" in shm_cpu and "ddp" in peer_cpu:
        added.append(f"shm {shm_cpu['bucketed'] - ours_cpu['none']:.1f} / "
                     f"{peer_cpu['ddp'] - peer_cpu['none']:.1f}")
    print("CPU ms/step added over no communication (rank 0, all threads), ours / DDP: " +
          ", ".join(added))
    ours_faults, peer_faults = (medians(f"{work}/ours_{model}", faults=True),
                                medians(f"{work}/peer_{model}", faults=True))
    if "none" in ours_faults and "none" in peer_faults:
        print(f"page faults per step, no communication (rank 0): ours "
              f"{ours_faults['none']:.0f} / DDP {peer_faults['none']:.0f}")
    if rounds > 0:
        # Per round: ours and DDP ran minutes (or less) apart, so each ratio sees one load.
        per_round = {}
        for r in range(1, rounds + 1):
            o, p, sh = (medians(f"{work}/{side}_{model}_{r}") for side in ("ours", "peer", "shm"))
            for label, oc, pc in [("none", "none", "none")] + pairs + [("shm", "bucketed", "ddp")]:
                mine = sh if label == "shm" else o
                if oc in mine and pc in p:
                    per_round.setdefault(label, []).append(mine[oc] / p[pc])
        print(f"per-round ratios ours/DDP over {rounds} interleaved rounds: median, min-max, "
              "bootstrap 90% interval of the median")
        for label, ratios in per_round.items():
            print(f"  {label:<10} {spread(ratios)}   ({' '.join(f'{x:.2f}' for x in ratios)})")
print("\n(overhead and hidden: ours / DDP; hidden shares are against the fp32 collectives)")
PY
# What the timeline of our bucketed strategy shows (rank 0, the last repeat's traced steps).
for model in ${models//,/ }; do
  t="${work}/traces_${model}"
  echo
  "${peer_python}" benchmarks/trace_overlap.py --none="${t}/none_world2_trace_rank0.json" \
    --allreduce="${t}/allreduce_world2_trace_rank0.json" "${t}/bucketed_world2_trace_rank0.json"
done
