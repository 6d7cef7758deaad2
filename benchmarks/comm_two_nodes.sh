#!/usr/bin/env bash
# Gradient communication over a real, bandwidth-limited link, ours against PyTorch DDP:
#   sudo bash benchmarks/comm_two_nodes.sh [--rate=1gbit --steps=30 --repeats=3]
#                                          [--interleave=N] [--malloc=shipped|defaults|retain]
# Two "nodes" on this machine: two network namespaces joined by a veth pair whose both ends
# are shaped to --rate by a token-bucket filter (tc tbf), one rank in each, Gloo over that
# link; the same network, batch and 1 MiB buckets as benchmarks/comm_vs_ddp.sh.
#
# Why this and not only loopback: on loopback the collectives are CPU work (copies through
# the kernel, the reduction), and with one busy rank per core there is no idle core to overlap
# them with, for us or for DDP. Between machines a collective mostly waits for the wire; that
# waiting is what bucketing overlaps with backward. Needs root (ip netns, tc).
#
# --interleave=N: N rounds instead of --repeats, ours first in odd rounds and DDP first in even
#   ones; prints the median of the per-round ratios ours/DDP with min-max and a bootstrap 90%
#   interval (benchmarks/paired_ratios.py). --malloc: the allocator on both sides, as in
#   comm_vs_ddp.sh (benchmarks/malloc_settings.sh; defaults and retain are like for like).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
source benchmarks/malloc_settings.sh
rate=1gbit steps=30 repeats=3 interleave=0 malloc=shipped
for arg in "$@"; do
  case "${arg}" in
    --rate=*) rate="${arg#*=}" ;;
    --steps=*) steps="${arg#*=}" ;;
    --repeats=*) repeats="${arg#*=}" ;;
    --interleave=*) interleave="${arg#*=}" ;;
    --malloc=*) malloc="${arg#*=}" ;;
    *) echo "unknown argument ${arg}; see the usage at the top of $0" >&2; exit 2 ;;
  esac
done
if ! [[ "${interleave}" =~ ^[0-9]+$ ]]; then
  echo "--interleave: a number of rounds (0: off), got ${interleave}" >&2
  exit 2
fi
malloc_settings "${malloc}" || exit 2
rounds=1 side_repeats="${repeats}"
if ((interleave > 0)); then rounds="${interleave}" side_repeats=1; fi
if [[ $(id -u) -ne 0 ]]; then
  echo "comm_two_nodes: needs root for ip netns and tc" >&2
  exit 2
fi
bazel build -c opt //distributed/strategies:comm_benchmark >/tmp/comm_two_nodes_build.log 2>&1 ||
  { cat /tmp/comm_two_nodes_build.log; exit 1; }
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/distributed/strategies/comm_benchmark"

ns0=vision_bench0 ns1=vision_bench1 addr0=10.231.0.1 addr1=10.231.0.2
remove_namespaces() {
  ip netns del "${ns0}" 2>/dev/null || true  # takes the veth pair with it
  ip netns del "${ns1}" 2>/dev/null || true
}
remove_namespaces  # left over from an interrupted run
work=$(mktemp -d)
trap 'remove_namespaces; rm -rf "${work}"' EXIT
ip netns add "${ns0}"
ip netns add "${ns1}"
ip link add vbench0 type veth peer name vbench1
ip link set vbench0 netns "${ns0}"
ip link set vbench1 netns "${ns1}"
ip -n "${ns0}" addr add "${addr0}/24" dev vbench0
ip -n "${ns1}" addr add "${addr1}/24" dev vbench1
for ns in "${ns0}" "${ns1}"; do ip -n "${ns}" link set lo up; done
ip -n "${ns0}" link set vbench0 up
ip -n "${ns1}" link set vbench1 up
ip netns exec "${ns0}" tc qdisc add dev vbench0 root tbf rate "${rate}" burst 256kb latency 100ms
ip netns exec "${ns1}" tc qdisc add dev vbench1 root tbf rate "${rate}" burst 256kb latency 100ms

common=(--steps="${steps}" --repeats="${side_repeats}" --threads=1 --bucket_cap_mb=1 --world=2
        --master_addr="${addr0}")
# Both ranks in parallel, one per namespace; rank 0 prints.
pair() {
  local out=$1
  shift
  ip netns exec "${ns0}" env GLOO_SOCKET_IFNAME=vbench0 "$@" --rank=0 >"${out}" &
  local first=$!
  ip netns exec "${ns1}" env GLOO_SOCKET_IFNAME=vbench1 "$@" --rank=1 >/dev/null
  wait "${first}"
}
echo "two namespaces, veth shaped to ${rate} each way; ${steps} timed steps, ${rounds} round(s) of ${side_repeats} repeat(s); --malloc=${malloc}"
run_ours() {
  pair "${work}/ours_${round}" "${bin}" "${common[@]}" "${ours_malloc[@]}" --master_port=29811 \
    --configs=none,collectives,allreduce,bucketed,fp16_compress
  echo "== ours"
  cat "${work}/ours_${round}"
}
run_peer() {
  pair "${work}/peer_${round}" env "${peer_malloc[@]}" "${peer_python}" benchmarks/ddp_peer.py \
    "${common[@]}" --master_port=29911 --configs=none,ddp,ddp_fp16
  echo "== PyTorch DDP"
  cat "${work}/peer_${round}"
}
for ((round = 1; round <= rounds; ++round)); do
  ((rounds == 1)) || echo "== round ${round} of ${rounds}"
  if ((round % 2)); then run_ours; run_peer; else run_peer; run_ours; fi
done
cat "${work}"/ours_* >"${work}/ours"
cat "${work}"/peer_* >"${work}/peer"
"${peer_python}" - "${work}" "${rounds}" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
from paired_ratios import medians, spread
work, rounds = sys.argv[1], int(sys.argv[2])
ours, peer = medians(f"{work}/ours"), medians(f"{work}/peer")
collectives = ours["collectives"]
print("\nmedian ms/step, world 2       ours   PyTorch   ours/PyTorch")
print(f"no communication         {ours['none']:8.1f}  {peer['none']:8.1f}   {ours['none'] / peer['none']:.2f}")
print(f"bucketed (DDP)           {ours['bucketed']:8.1f}  {peer['ddp']:8.1f}   {ours['bucketed'] / peer['ddp']:.2f}")
print(f"fp16 compression         {ours['fp16_compress']:8.1f}  {peer['ddp_fp16']:8.1f}   "
      f"{ours['fp16_compress'] / peer['ddp_fp16']:.2f}   (DDP + fp16 hook)")
print(f"allreduce after backward {ours['allreduce']:8.1f}")
print(f"the collectives alone    {collectives:8.1f}")
for label, step, none in (("ours (bucketed)", ours["bucketed"], ours["none"]),
                          ("PyTorch DDP", peer["ddp"], peer["none"])):
    hidden = min(1.0, max(0.0, 1 - (step - none) / collectives)) * 100
    print(f"{label}: overhead {step - none:.1f} ms over no communication, "
          f"{hidden:.0f}% of the collectives' time hidden behind backward")
if rounds > 1:
    print(f"per-round ratios ours/DDP over {rounds} interleaved rounds: median, min-max, "
          "bootstrap 90% interval of the median")
    for label, o, p in (("none", "none", "none"), ("bucketed", "bucketed", "ddp"),
                        ("fp16", "fp16_compress", "ddp_fp16")):
        ratios = []
        for r in range(1, rounds + 1):
            mo, mp = medians(f"{work}/ours_{r}"), medians(f"{work}/peer_{r}")
            if o in mo and p in mp:
                ratios.append(mo[o] / mp[p])
        print(f"  {label:<10} {spread(ratios)}   ({' '.join(f'{x:.2f}' for x in ratios)})")
PY
