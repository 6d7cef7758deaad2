#!/usr/bin/env bash
# Mask R-CNN R50-FPN on CPU, ours against torchvision 0.26 in PyTorch 2.11 on the same weights,
# images and targets (benchmarks/mask_rcnn_peer.py writes them), in one command:
#   bash benchmarks/mask_rcnn_step.sh [--size=512 --batch=2 --steps=3 --threads=1]
# Training step (forward, backward, SGD step) and inference (detections and masks pasted at the
# image size) times, and the ratios ours / torchvision.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
bazel build -c opt //models/mask_rcnn:mask_rcnn_benchmark >/tmp/mask_rcnn_step_build.log 2>&1 ||
  { cat /tmp/mask_rcnn_step_build.log; exit 1; }
args=(--size=512 --batch=2 --steps=3 --threads=1 "$@")
shared=()
for a in "${args[@]}"; do [[ "${a}" == --steps=* || "${a}" == --threads=* ]] && shared+=("${a}"); done
dir="$(mktemp -d)"
trap 'rm -rf "${dir}"' EXIT
"${peer_python}" benchmarks/mask_rcnn_peer.py "${args[@]}" --write="${dir}"
echo "config: Mask R-CNN R50-FPN, 91 classes, ${args[*]}"
ours=$("$(bazel info -c opt bazel-bin)/models/mask_rcnn/mask_rcnn_benchmark" --dir="${dir}" "${shared[@]}")
peer=$("${peer_python}" benchmarks/mask_rcnn_peer.py "${args[@]}")
echo "ours:        ${ours//$'\n'/; }"
echo "torchvision: ${peer//$'\n'/; }"
"${peer_python}" - "${ours}" "${peer}" <<'PY'
import re, sys
def parse(text):
    train = re.search(r"train step ([0-9.]+) s \(forward ([0-9.]+), backward ([0-9.]+), "
                      r"optimizer ([0-9.]+)\)", text)
    infer = float(re.search(r"inference ([0-9.]+) s", text).group(1))
    return [float(train.group(i)) for i in range(1, 5)] + [infer]
ours, peer = parse(sys.argv[1]), parse(sys.argv[2])
names = ["train step", "  forward", "  backward", "  optimizer", "inference"]
print(f"{'':12s} {'ours (s)':>9s} {'torchvision (s)':>16s} {'ours/torchvision':>17s}")
for name, o, p in zip(names, ours, peer):
    print(f"{name:12s} {o:9.3f} {p:16.3f} {o / p:17.2f}")
PY
