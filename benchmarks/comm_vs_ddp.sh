#!/usr/bin/env bash
# Gradient communication, ours against PyTorch DDP (venv torch), side by side in one command:
#   bash benchmarks/comm_vs_ddp.sh [--steps=30 --repeats=3 --resnet_steps=8 --models=small,resnet18]
# For each model (the small conv net at 32x32, batch 8; ResNet-18 at 224x224, batch 4), the
# same network, batch, bucket size (1 MiB) and thread count (1 per rank) on CPU with Gloo, two
# ranks; each configuration's median over the repeats, then per strategy pair (ours, DDP's):
# the step-time ratio, the overhead over no communication, and the share of the communication
# hidden behind backward, 1 - (step - none) / collectives, where "collectives" is the time of
# our bucketed strategy's buckets all-reduced alone, with no model running (the same for both
# sides: what is not hidden shows up as overhead).
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
steps=30 repeats=3 resnet_steps=8 models=small,resnet18
for arg in "$@"; do
  case "${arg}" in
    --steps=*) steps="${arg#*=}" ;;
    --repeats=*) repeats="${arg#*=}" ;;
    --resnet_steps=*) resnet_steps="${arg#*=}" ;;
    --models=*) models="${arg#*=}" ;;
    *) echo "unknown argument ${arg}; see the usage at the top of $0" >&2; exit 2 ;;
  esac
done
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
  common=("${args[@]}" --repeats="${repeats}" --bucket_cap_mb=1 --threads=1 --worlds=2)
  echo "== ${model}: ours"
  # After each configuration's timed steps, 3 traced steps (the last repeat's trace is kept).
  mkdir -p "${work}/traces_${model}"
  "${bin}" "${common[@]}" --configs="${ours_configs}" --trace_dir="${work}/traces_${model}" \
    --trace_steps=3 | tee "${work}/ours_${model}"
  # The same buckets through the shared-memory backend (distributed/shm, backend SHM).
  echo "== ${model}: ours, bucketed over shared memory"
  "${bin}" "${common[@]}" --backend=shm --configs=collectives,bucketed | tee "${work}/shm_${model}"
  echo "== ${model}: PyTorch DDP"
  "${peer_python}" benchmarks/ddp_peer.py "${common[@]}" --configs="${peer_configs}" |
    tee "${work}/peer_${model}"
done
"${peer_python}" - "${work}" "${models}" "${PAIRS[@]}" <<'PY'
import re, statistics, sys
work, models, pairs = sys.argv[1], sys.argv[2].split(","), [p.split() for p in sys.argv[3:]]
def medians(path, cpu=False):
    runs = {}
    for line in open(path):
        m = re.match(r"(\S+)\s+world 2 +([\d.]+) ms/step", line)
        c = re.search(r"cpu ([\d.]+) ms/step", line)
        if m and (c or not cpu):
            runs.setdefault(m.group(1), []).append(float(c.group(1) if cpu else m.group(2)))
    return {k: statistics.median(v) for k, v in runs.items()}
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
    print("CPU ms/step added over no communication (rank 0, all threads), ours / DDP: " +
          ", ".join(f"{label} {ours_cpu[o] - ours_cpu['none']:.1f} / "
                    f"{peer_cpu[p] - peer_cpu['none']:.1f}" for label, o, p in pairs
                    if o in ours_cpu and p in peer_cpu))
print("\n(overhead and hidden: ours / DDP; hidden shares are against the fp32 collectives)")
PY
# What the timeline of our bucketed strategy shows (rank 0, the last repeat's traced steps).
for model in ${models//,/ }; do
  t="${work}/traces_${model}"
  echo
  "${peer_python}" benchmarks/trace_overlap.py --none="${t}/none_world2_trace_rank0.json" \
    --allreduce="${t}/allreduce_world2_trace_rank0.json" "${t}/bucketed_world2_trace_rank0.json"
done
