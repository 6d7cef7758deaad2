#!/usr/bin/env bash
# Data-loading throughput on DBNet's training pipeline (JPEG decode, the augmentations of
# models/dbnet/configs/icdar2015_resnet18.pbtxt, DB target generation, batches of 8), our
# DataLoader against a Python PyTorch DataLoader doing the same with OpenCV and pyclipper
# (benchmarks/loader_peer.py), at the same thread / worker counts, in one command:
#   bash benchmarks/loader_vs_dataloader.sh [--images=200 --size=640 --threads=1,2,4 --epochs=1]
# The data is a synthetic ICDAR2015-layout set (//data/synthetic) of --images JPEGs of
# --size x --size pixels with 8 to 16 words each, written to a temporary directory.
# Every worker uses one thread on both sides (at::set_num_threads(1), cv::setNumThreads(0);
# torch.set_num_threads(1), cv2.setNumThreads(0)). CPU ms per image (all threads and worker
# processes) is printed too: unlike images/s it holds when other programs share the cores.
# BAZEL names the bazel command (default: bazel).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
images=200 size=640 threads=1,2,4 epochs=1 batch=8
for arg in "$@"; do
  case "${arg}" in
    --images=*) images=${arg#*=} ;;
    --size=*) size=${arg#*=} ;;
    --threads=*) threads=${arg#*=} ;;
    --epochs=*) epochs=${arg#*=} ;;
    --batch=*) batch=${arg#*=} ;;
    *) echo "unknown argument ${arg}; see the usage at the top of $0" >&2; exit 2 ;;
  esac
done
read -r -a bazel <<< "${BAZEL:-bazel}"
log=$(mktemp)
data=$(mktemp -d)
trap 'rm -rf "${data}" "${log}"' EXIT
"${bazel[@]}" build -c opt //data/loader:loader_benchmark //data/synthetic:make_synthetic_text \
  >"${log}" 2>&1 || { cat "${log}"; exit 1; }
bin=$("${bazel[@]}" info -c opt bazel-bin 2>/dev/null)
"${bin}/data/synthetic/make_synthetic_text" --output_dir="${data}" --num_train="${images}" \
  --num_test=0 --width="${size}" --height="${size}" --min_words=8 --max_words=16 --seed=1 >/dev/null
texts=$(cat "${data}"/ch4_training_localization_transcription_gt/*.txt | wc -l)
echo "data: ${images} synthetic ${size}x${size} JPEGs, $((texts / images)) text quads per image on average"

common=(--data_dir="${data}" --threads="${threads}" --batch="${batch}" --epochs="${epochs}")
ours=$("${bin}/data/loader/loader_benchmark" "${common[@]}" \
  --config="${PWD}/models/dbnet/configs/icdar2015_resnet18.pbtxt")
peer=$("${peer_python}" benchmarks/loader_peer.py "${common[@]}")
echo "${ours}"
echo "${peer}"
echo
"${peer_python}" - "${threads}" <<EOF
import re, sys
pattern = r" (\d+): ([0-9.]+) images/s, ([0-9.]+) CPU ms/image"
ours = {t: (float(r), float(c)) for t, r, c in re.findall("ours threads" + pattern, """${ours}""")}
peer = {t: (float(r), float(c)) for t, r, c in re.findall("python workers" + pattern, """${peer}""")}
print(f"{'threads':>7} {'ours img/s':>11} {'python img/s':>13} {'ours/python':>12}"
      f" {'CPU ms/img ours':>16} {'python':>7} {'python/ours':>12}")
for t in sys.argv[1].split(","):
    (o, oc), (p, pc) = ours[t], peer[t]
    print(f"{t:>7} {o:11.1f} {p:13.1f} {o / p:11.2f}x {oc:16.1f} {pc:7.1f} {pc / oc:11.2f}x")
if "1" in ours and "2" in ours:
    print(f"scaling 1 -> 2 threads: ours {ours['2'][0] / ours['1'][0]:.2f}x, "
          f"python {peer['2'][0] / peer['1'][0]:.2f}x")
EOF
