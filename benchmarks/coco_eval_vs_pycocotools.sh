#!/usr/bin/env bash
# COCO box and mask AP evaluation end to end, our evaluator (evaluation/coco/coco_protocol.h,
# driven by //evaluation/coco:coco_eval_benchmark) against pycocotools' COCOeval
# (benchmarks/coco_eval_peer.py), on the same two files, in one command:
#   bash benchmarks/coco_eval_vs_pycocotools.sh [--images=5000 --seed=1]
# The data, written to a temporary directory from a fixed seed: a COCO instances file of
# --images 640x480 images (1 to 10 polygon objects each in categories 1, 3, 7, 12, in two-decimal
# coordinates, some crossing the border, crowd RLE
# regions in about one image in six) and a results JSON of about 20 detections per image
# (perturbed ground truth and random false positives, masks as compressed RLE, boxes).
# Both sides time the whole job: reading the two JSON files and evaluating bbox and segm
# (evaluate + accumulate + summarize), on one thread each. Prints both sides' twelve
# numbers, the seconds, the ratio python/ours and whether all 24 numbers agree within 1e-6.
# BAZEL names the bazel command (default: bazel).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
images=5000 seed=1
for arg in "$@"; do
  case "${arg}" in
    --images=*) images=${arg#*=} ;;
    --seed=*) seed=${arg#*=} ;;
    *) echo "unknown argument ${arg}; see the usage at the top of $0" >&2; exit 2 ;;
  esac
done
read -r -a bazel <<< "${BAZEL:-bazel}"
log=$(mktemp)
data=$(mktemp -d)
trap 'rm -rf "${data}" "${log}"' EXIT
"${bazel[@]}" build -c opt //evaluation/coco:coco_eval_benchmark >"${log}" 2>&1 \
  || { cat "${log}"; exit 1; }
bin=$("${bazel[@]}" info -c opt bazel-bin 2>/dev/null)
"${peer_python}" benchmarks/coco_eval_peer.py generate --images="${images}" --seed="${seed}" \
  --out="${data}"
ours=$("${bin}/evaluation/coco/coco_eval_benchmark" --annotations="${data}/instances.json" \
  --results="${data}/results.json")
peer=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
  "${peer_python}" benchmarks/coco_eval_peer.py evaluate --out="${data}")
echo "${ours}" | grep seconds
echo "${peer}" | grep seconds
echo
"${peer_python}" - <<EOF
import re
def parse(text, side):
    stats = {t: [float(v) for v in re.search(side + " " + t + " (.*)", text).group(1).split()]
             for t in ("bbox", "segm")}
    return stats, float(re.search(side + r" seconds ([0-9.]+)", text).group(1))
ours, ours_s = parse("""${ours}""", "ours")
peer, peer_s = parse("""${peer}""", "python")
names = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"]
print(f"{'':6} {'':6} {'ours':>14} {'pycocotools':>14} {'|diff|':>9}")
worst = 0.0
for t in ("bbox", "segm"):
    for name, o, p in zip(names, ours[t], peer[t]):
        worst = max(worst, abs(o - p))
        print(f"{t:6} {name:6} {o:14.10f} {p:14.10f} {abs(o - p):9.1e}")
print(f"\nseconds, end to end (parse + bbox + segm): ours {ours_s:.3f}, pycocotools {peer_s:.3f},"
      f" pycocotools/ours {peer_s / ours_s:.1f}x (goal: 5x)")
print(f"twelve numbers agree within 1e-6 (bbox and segm): {'yes' if worst <= 1e-6 else 'NO'}"
      f" (largest difference {worst:.1e})")
EOF
