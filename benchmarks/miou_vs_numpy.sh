#!/usr/bin/env bash
# The mIoU evaluator's confusion matrix against the same computation in numpy, in one command:
#   bash benchmarks/miou_vs_numpy.sh [--images=20 --height=1024 --width=2048 --repeats=3 --noise=0]
# benchmarks/miou_peer.py writes --images pairs of Cityscapes-sized label maps from a fixed seed
# (raw bytes in a temporary directory, so neither side times PNG decoding; --noise sets that
# fraction of prediction pixels to random classes, the case without long runs); ours
# (//evaluation/semantic_segmentation:miou_benchmark, SemanticSegmentationEvaluator::Add over
# every pair, then Compute) and numpy's np.bincount confusion matrix each score them --repeats
# times on one thread; prints the best images/s of each, the ratio, and whether mIoU, aAcc and
# mAcc agree. BAZEL names the bazel command (default: bazel).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
images=20 height=1024 width=2048 repeats=3 noise=0
for arg in "$@"; do
  case "${arg}" in
    --images=*) images=${arg#*=} ;;
    --height=*) height=${arg#*=} ;;
    --width=*) width=${arg#*=} ;;
    --repeats=*) repeats=${arg#*=} ;;
    --noise=*) noise=${arg#*=} ;;
    *) echo "unknown argument ${arg}; see the usage at the top of $0" >&2; exit 2 ;;
  esac
done
read -r -a bazel <<< "${BAZEL:-bazel}"
log=$(mktemp)
data=$(mktemp -d)
trap 'rm -rf "${data}" "${log}"' EXIT
"${bazel[@]}" build -c opt //evaluation/semantic_segmentation:miou_benchmark >"${log}" 2>&1 \
  || { cat "${log}"; exit 1; }
bin=$("${bazel[@]}" info -c opt bazel-bin 2>/dev/null)
sizes=(--images="${images}" --height="${height}" --width="${width}")
"${peer_python}" benchmarks/miou_peer.py generate "${sizes[@]}" --noise="${noise}" --out="${data}"
ours=$("${bin}/evaluation/semantic_segmentation/miou_benchmark" --data="${data}" "${sizes[@]}" \
  --repeats="${repeats}")
peer=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
  "${peer_python}" benchmarks/miou_peer.py evaluate "${sizes[@]}" --out="${data}" \
  --repeats="${repeats}")
echo "${ours}"
echo "${peer}"
"${peer_python}" - <<PY
import re
def parse(text, side):
    speed = float(re.search(side + r" images_per_s ([0-9.]+)", text).group(1))
    values = [float(v) for v in re.search(side + r" mIoU (\S+) aAcc (\S+) mAcc (\S+)", text).groups()]
    return speed, values
ours, ours_values = parse("""${ours}""", "ours")
peer, peer_values = parse("""${peer}""", "numpy")
worst = max(abs(a - b) for a, b in zip(ours_values, peer_values))
print(f"\n${width}x${height}, ${images} images, noise ${noise}: ours {ours:.1f} images/s, numpy {peer:.1f} images/s, "
      f"ours/numpy {ours / peer:.1f}x")
print(f"mIoU, aAcc, mAcc agree within 1e-12: {'yes' if worst <= 1e-12 else 'NO'} "
      f"(largest difference {worst:.1e})")
PY
