#!/usr/bin/env bash
# Mask R-CNN R50-FPN on CPU, ours against torchvision 0.26 in PyTorch 2.11 on the same weights,
# images and targets (benchmarks/mask_rcnn_peer.py writes them), in one command:
#   bash benchmarks/mask_rcnn_step.sh [--size=512 --batch=2 --steps=3 --threads=1]
#                                     [--cpu_convolution=aten|winograd]
#                                     [--op_table[=train|infer|both]] [--profile_dir=DIR]
# Training step (forward, backward, SGD step) and inference (detections and masks pasted at the
# image size) times, and the ratios ours / torchvision.
# --cpu_convolution=winograd: ours with TrainPipelineConfig.cpu_convolution WINOGRAD (the 3x3
#   stride-1 convolutions by Winograd F(4x4, 3x3), models/ops/winograd_conv.h; the backbone then
#   runs NCHW instead of channels-last); torchvision has no such path. Default aten.
# --op_table: also profiles two more training steps (forward, backward) of each side at 1 thread
#   (Kineto, mask_rcnn_benchmark --profile_dir; torch.profiler, mask_rcnn_peer.py --profile_dir)
#   and prints benchmarks/op_table.py's operator table (calls and self ms per step, ours /
#   torchvision). Self times are wall clock and follow the machine's load; counts do not. Our
#   RoIAlign and NMS kernels appear as vision::roi_align, vision::_roi_align_backward and
#   vision::nms (torchvision's: torchvision::...). The RoIs are sampled at random on each side, so
#   the RoI heads' shapes and counts differ a little from run to run.
# --op_table=infer: the same for two more inference batches of each side (Predict, which also
#   RLE-encodes the pasted masks, against the peer's no-grad forward and paste_masks_in_image);
#   --op_table=both: both tables. The inference table's "all operators" self ms against the
#   inference time above shows the time outside ATen operators (e.g. our RLE encoding).
# --profile_dir=DIR: as --op_table, and keeps the traces as DIR/ours.json and DIR/peer.json
#   (training), DIR/ours_infer.json and DIR/peer_infer.json (inference) (e.g. for
#   python3 benchmarks/op_table.py DIR/ours.json DIR/peer.json --shapes).
set -euo pipefail
op_table="" keep="" convolution=aten
args=(--size=512 --batch=2 --steps=3 --threads=1)
for a in "$@"; do
  case "${a}" in
    --op_table) op_table=train ;;
    --op_table=train | --op_table=infer | --op_table=both) op_table="${a#*=}" ;;
    --profile_dir=*) op_table="${op_table:-train}" keep="${a#*=}" ;;
    --size=* | --batch=* | --steps=* | --threads=*) args+=("${a}") ;;
    --cpu_convolution=aten | --cpu_convolution=winograd) convolution="${a#*=}" ;;
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
shared+=(--cpu_convolution="${convolution}")
echo "config: Mask R-CNN R50-FPN, 91 classes, ${args[*]}, ours with cpu_convolution ${convolution}"
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
if [[ -n "${op_table}" ]]; then
  # Separate runs at 1 thread (after their own warm-up and timed steps), so that the profiler's
  # overhead stays out of the times above.
  profile=(--steps=1 --threads=1 --profile_steps=2 --profile="${op_table}")
  mkdir -p "${dir}/profile_ours" "${dir}/profile_peer"
  "$(bazel info -c opt bazel-bin)/models/mask_rcnn/mask_rcnn_benchmark" --dir="${dir}" \
    "${profile[@]}" --cpu_convolution="${convolution}" --profile_dir="${dir}/profile_ours" >/dev/null
  "${peer_python}" benchmarks/mask_rcnn_peer.py "${args[@]}" "${profile[@]}" \
    --profile_dir="${dir}/profile_peer" >/dev/null
  for kind in train infer; do
    [[ "${op_table}" == both || "${op_table}" == "${kind}" ]] || continue
    if [[ "${kind}" == train ]]; then
      echo "== operators of one training step (forward, backward) at 1 thread, ours / torchvision"
      suffix=""
    else
      echo "== operators of one inference batch at 1 thread, ours / torchvision"
      suffix="_infer"
    fi
    "${peer_python}" benchmarks/op_table.py --steps=2 --top=40 \
      "${dir}/profile_ours/${kind}_profile.json" "${dir}/profile_peer/${kind}_profile.json"
    if [[ -n "${keep}" ]]; then
      cp "${dir}/profile_ours/${kind}_profile.json" "${keep}/ours${suffix}.json"
      cp "${dir}/profile_peer/${kind}_profile.json" "${keep}/peer${suffix}.json"
      echo "traces: ${keep}/ours${suffix}.json ${keep}/peer${suffix}.json"
    fi
  done
fi
