#!/usr/bin/env bash
# Mask R-CNN R50-FPN on CPU, ours against torchvision 0.26 in PyTorch 2.11 on the same weights,
# images and targets (benchmarks/mask_rcnn_peer.py writes them), in one command:
#   bash benchmarks/mask_rcnn_step.sh [--size=512 --batch=2 --steps=3 --threads=1] [--op_table]
#                                     [--profile_dir=DIR]
# Training step (forward, backward, SGD step) and inference (detections and masks pasted at the
# image size) times, and the ratios ours / torchvision.
# --op_table: also profiles two more training steps (forward, backward) of each side at 1 thread
#   (Kineto, mask_rcnn_benchmark --profile_dir; torch.profiler, mask_rcnn_peer.py --profile_dir)
#   and prints benchmarks/op_table.py's operator table (calls and self ms per step, ours /
#   torchvision). Self times are wall clock and follow the machine's load; counts do not. Our
#   RoIAlign and NMS kernels appear as vision::roi_align, vision::_roi_align_backward and
#   vision::nms (torchvision's: torchvision::...). The RoIs are sampled at random on each side, so
#   the RoI heads' shapes and counts differ a little from run to run.
# --profile_dir=DIR: as --op_table, and keeps the two traces as DIR/ours.json and DIR/peer.json
#   (e.g. for python3 benchmarks/op_table.py DIR/ours.json DIR/peer.json --shapes).
set -euo pipefail
op_table=0 keep=""
args=(--size=512 --batch=2 --steps=3 --threads=1)
for a in "$@"; do
  case "${a}" in
    --op_table) op_table=1 ;;
    --profile_dir=*) op_table=1 keep="${a#*=}" ;;
    --size=* | --batch=* | --steps=* | --threads=*) args+=("${a}") ;;
    *) echo "unknown argument ${a}; see the usage at the top of $0" >&2; exit 2 ;;
  esac
done
if [[ -n "${keep}" ]]; then
  # Relative to the caller's directory, not the repository root the script moves to.
  mkdir -p "${keep}" || { echo "--profile_dir=${keep}: cannot create the directory" >&2; exit 2; }
  keep="$(cd "${keep}" && pwd)"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
bazel build -c opt //models/mask_rcnn:mask_rcnn_benchmark >/tmp/mask_rcnn_step_build.log 2>&1 ||
  { cat /tmp/mask_rcnn_step_build.log; exit 1; }
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
if ((op_table)); then
  # Separate runs at 1 thread (after their own warm-up and timed steps), so that the profiler's
  # overhead stays out of the times above.
  profile=(--steps=1 --threads=1 --profile_steps=2)
  mkdir -p "${dir}/profile_ours" "${dir}/profile_peer"
  "$(bazel info -c opt bazel-bin)/models/mask_rcnn/mask_rcnn_benchmark" --dir="${dir}" \
    "${profile[@]}" --profile_dir="${dir}/profile_ours" >/dev/null
  "${peer_python}" benchmarks/mask_rcnn_peer.py "${args[@]}" "${profile[@]}" \
    --profile_dir="${dir}/profile_peer" >/dev/null
  echo "== operators of one training step (forward, backward) at 1 thread, ours / torchvision"
  "${peer_python}" benchmarks/op_table.py --steps=2 --top=40 \
    "${dir}/profile_ours/train_profile.json" "${dir}/profile_peer/train_profile.json"
  if [[ -n "${keep}" ]]; then
    cp "${dir}/profile_ours/train_profile.json" "${keep}/ours.json"
    cp "${dir}/profile_peer/train_profile.json" "${keep}/peer.json"
    echo "traces: ${keep}/ours.json ${keep}/peer.json"
  fi
fi
