#!/usr/bin/env bash
# Gradient communication, ours against PyTorch DDP, side by side in one command:
#   bash benchmarks/comm_vs_ddp.sh [--steps=30 --repeats=3]
# Same network, batch, bucket size and thread count on CPU with Gloo; each configuration's
# median over the repeats, then the ratios: our bucketed step over DDP's, and the share of the
# communication hidden behind backward, 1 - (bucketed - none) / collectives, where
# "collectives" is the time of the same buckets' all-reduces alone, with no model running.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
bazel build -c opt //distributed/strategies:comm_benchmark >/tmp/comm_vs_ddp_build.log 2>&1 ||
  { cat /tmp/comm_vs_ddp_build.log; exit 1; }
steps=30 repeats=3
for arg in "$@"; do
  case "${arg}" in
    --steps=*) steps="${arg#*=}" ;;
    --repeats=*) repeats="${arg#*=}" ;;
  esac
done
ours=$(mktemp) peer=$(mktemp) shm=$(mktemp)
trap 'rm -f "${ours}" "${peer}" "${shm}"' EXIT
"$(bazel info -c opt bazel-bin)/distributed/strategies/comm_benchmark" \
  --steps="${steps}" --repeats="${repeats}" --bucket_cap_mb=1 --threads=1 | tee "${ours}"
"${peer_python}" benchmarks/ddp_peer.py --steps="${steps}" --repeats="${repeats}" \
  --bucket_cap_mb=1 --threads=1 | tee "${peer}"
"${peer_python}" - "${ours}" "${peer}" <<'PY'
import re, statistics, sys
def medians(path):
    runs = {}
    for line in open(path):
        m = re.match(r"(\S+)\s+world (\d) +([\d.]+) ms/step", line)
        if m:
            runs.setdefault((m.group(1), int(m.group(2))), []).append(float(m.group(3)))
    return {k: statistics.median(v) for k, v in runs.items()}
ours, peer = medians(sys.argv[1]), medians(sys.argv[2])
print("\nmedian ms/step        ours    PyTorch   ours/PyTorch")
for world in (1, 2):
    print(f"world {world} no comm   {ours[('none', world)]:8.1f} {peer[('none', world)]:9.1f}"
          f"   {ours[('none', world)] / peer[('none', world)]:.2f}")
    print(f"world {world} bucketed  {ours[('bucketed', world)]:8.1f} {peer[('ddp', world)]:9.1f}"
          f"   {ours[('bucketed', world)] / peer[('ddp', world)]:.2f}   (DDP)")
    print(f"world {world} fp16      {ours[('fp16_compress', world)]:8.1f} {peer[('ddp_fp16', world)]:9.1f}"
          f"   {ours[('fp16_compress', world)] / peer[('ddp_fp16', world)]:.2f}   (DDP + fp16 hook)")
none, bucketed, flat = ours[("none", 2)], ours[("bucketed", 2)], ours[("allreduce", 2)]
collectives = ours[("collectives", 2)]
ddp_overhead = peer[("ddp", 2)] - peer[("none", 2)]
print(f"\nworld 2: the collectives alone (same buckets, no model): {collectives:.1f} ms/step")
print(f"communication overhead over no communication: ours {bucketed - none:.1f} ms (bucketed), "
      f"{flat - none:.1f} ms (allreduce after backward); PyTorch DDP {ddp_overhead:.1f} ms")
if collectives > 0:
    print(f"share of the collectives' time hidden behind backward: ours (bucketed) "
          f"{max(0.0, 1 - (bucketed - none) / collectives) * 100:.0f}%, PyTorch DDP "
          f"{max(0.0, 1 - ddp_overhead / collectives) * 100:.0f}%")
PY

# The same buckets through the shared-memory backend (distributed/shm): its step against DDP's
# and the share of its collectives hidden behind backward ("none" is the Gloo run's).
"$(bazel info -c opt bazel-bin)/distributed/strategies/comm_benchmark" --backend=shm \
  --configs=collectives,bucketed --steps="${steps}" --repeats="${repeats}" --bucket_cap_mb=1 \
  --threads=1 | tee "${shm}"
"${peer_python}" - "${ours}" "${peer}" "${shm}" <<'PY'
import re, statistics, sys
def medians(path):
    runs = {}
    for line in open(path):
        m = re.match(r"(\S+)\s+world (\d) +([\d.]+) ms/step", line)
        if m:
            runs.setdefault((m.group(1), int(m.group(2))), []).append(float(m.group(3)))
    return {k: statistics.median(v) for k, v in runs.items()}
ours, peer, shm = (medians(p) for p in sys.argv[1:4])
none, ddp = ours[("none", 2)], peer[("ddp", 2)]
step, collectives = shm[("bucketed", 2)], shm[("collectives", 2)]
print(f"\nworld 2 bucketed over shm: {step:.1f} ms/step, {step / ddp:.2f} x DDP ({ddp:.1f} ms), "
      f"{step / ours[('bucketed', 2)]:.2f} x bucketed over Gloo")
print(f"collectives alone: shm {collectives:.1f} ms/step, Gloo {ours[('collectives', 2)]:.1f} "
      f"(Gloo/shm {ours[('collectives', 2)] / collectives:.2f}); share hidden behind backward "
      f"over shm {min(1.0, max(0.0, 1 - (step - none) / collectives)) * 100:.0f}%")
PY
