#!/usr/bin/env bash
# Detection operators on CPU, ours (models/ops) against torchvision.ops, in one command:
#   bash benchmarks/ops_vs_torchvision.sh [--threads=1,2 --repeats=20 --warmup=3 --seed=0]
# benchmarks/ops_peer.py writes one set of seeded inputs (torch.save of a plain dict) that both
# sides load: NMS of 5,000 boxes (10-200 px in an 800x800 image, scores uniform) at IoU 0.7, and
# MultiScaleRoIAlign forward + backward of sum() for 512 RoIs over a 1x256 FPN at strides 4..32
# (7x7, sampling ratio 2). For each thread count (at::set_num_threads / torch.set_num_threads,
# one process per side and count) it prints the median of the timed runs and ours/torchvision,
# then the checksums of both sides (kept boxes, pooled and gradient sums), which should agree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
threads=1,2
repeats=20
warmup=3
seed=0
for arg in "$@"; do
  case "${arg}" in
    --threads=*) threads="${arg#*=}" ;;
    --repeats=*) repeats="${arg#*=}" ;;
    --warmup=*) warmup="${arg#*=}" ;;
    --seed=*) seed="${arg#*=}" ;;
    *) echo "unknown argument ${arg}" >&2; exit 2 ;;
  esac
done
bazel build -c opt //models/ops:ops_benchmark >/tmp/ops_vs_torchvision_build.log 2>&1 ||
  { cat /tmp/ops_vs_torchvision_build.log; exit 1; }
bin="$(bazel info -c opt bazel-bin)/models/ops/ops_benchmark"
inputs="$(mktemp /tmp/ops_vs_torchvision.XXXXXX.pt)"
trap 'rm -f "${inputs}"' EXIT
"${peer_python}" benchmarks/ops_peer.py --make-inputs="${inputs}" --seed="${seed}"
field() { sed -n "s/^$1 \(.*\)/\1/p"; }
echo "config: ${repeats} timed runs after ${warmup} warm-up runs, medians in ms; seed ${seed}"
printf '%-8s %-38s %10s %12s %14s\n' threads operator ours torchvision ours/torchvision
checks=()
IFS=, read -ra counts <<<"${threads}"
for n in "${counts[@]}"; do
  common=(--inputs="${inputs}" --threads="${n}" --repeats="${repeats}" --warmup="${warmup}")
  ours_out=$("${bin}" "${common[@]}")
  peer_out=$("${peer_python}" -W ignore benchmarks/ops_peer.py "${common[@]}")
  for op in nms roi_align; do
    ours=$(field "${op}_ms" <<<"${ours_out}")
    peer=$(field "${op}_ms" <<<"${peer_out}")
    label="NMS 5000 boxes, IoU 0.7"
    [[ "${op}" == roi_align ]] && label="MultiScaleRoIAlign fwd+bwd, 512 RoIs"
    ratio=$(awk -v a="${ours}" -v b="${peer}" 'BEGIN { printf "%.2f", a / b }')
    printf '%-8s %-38s %10.2f %12.2f %14s\n' "${n}" "${label}" "${ours}" "${peer}" "${ratio}"
  done
  checks+=("threads ${n} ours:        $(field check <<<"${ours_out}")")
  checks+=("threads ${n} torchvision: $(field check <<<"${peer_out}")")
done
printf '%s\n' "${checks[@]}"
