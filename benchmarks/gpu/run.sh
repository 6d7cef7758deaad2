#!/usr/bin/env bash
# The prepared GPU check (benchmarks/gpu/README.md), run from the repository root on the GPU
# machine with the bundle that make_bundle.sh built:
#   bash benchmarks/gpu/run.sh [--bundle=benchmarks/gpu/bundle] [--budget=450] [--cpu]
#                              [--parts=ops,cuda,dbnet,danet,maskrcnn,comm,quickstart]
# Parts: library preflight, the CUDA operator tests, the model and engine tests' CUDA cases, the
# DBNet-ResNet-18 training step (ours and PyTorch's, fp32 / bf16 / fp16 autocast), the
# DANet-ResNet-50 and Mask R-CNN R50-FPN training steps (ours and PyTorch's, fp32 / bf16), NCCL
# at world size 1 through the bucketed strategy's buckets, whether those all-reduces overlap
# backward (a traced world-1 NCCL run, trace_overlap.py), and a 200-step quick-start training
# with its held-out hmean, in that order of priority. Each part runs under `timeout`, cut to
# what is left of --budget seconds; a part that fails or times out is reported and the next one
# runs; parts left out of time are listed, for a rerun with --parts. Full logs go to $OUT/gpu_check/ when $OUT is set; the table at the end
# names every part's status, time, peak GPU memory and result.
# --cpu runs every part on the CPU with tiny sizes: how the bundle is checked where no GPU is.
# --parts runs only the parts whose name starts with one of the words (the preflight always
# runs): a rerun after a fix.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$PWD

bundle=benchmarks/gpu/bundle
budget=450
cpu=0
parts=""
for arg in "$@"; do
  case "${arg}" in
    --bundle=*) bundle=${arg#*=} ;;
    --budget=*) budget=${arg#*=} ;;
    --cpu) cpu=1 ;;
    --parts=*) parts=",${arg#*=}," ;;
    *) echo "usage: $0 [--bundle=DIR] [--budget=SECONDS] [--cpu] [--parts=WORD,...]" >&2
       exit 2 ;;
  esac
done
began=${SECONDS}

work=$(mktemp -d "${TMPDIR:-/tmp}/vision-gpu-check.XXXXXX")
logs=${OUT:+${OUT}/gpu_check}
logs=${logs:-${work}/logs}
mkdir -p "${logs}"

# A Python with torch: the GPU machine's (its LibTorch is what the binaries load), else this
# machine's project environment (--cpu here).
python=""
for candidate in "${PYTHON:-}" /opt/torch/.venv/bin/python3 python3 \
    "${VISION_VENV:-${HOME}/.cache/vision-train/venv}/bin/python3"; do
  [[ -n "${candidate}" ]] || continue
  if "${candidate}" -c 'import torch' 2>/dev/null; then python=${candidate}; break; fi
done
if [[ -z "${python}" ]]; then
  echo "run.sh: no python3 with torch found (tried \$PYTHON, /opt/torch/.venv, python3)" >&2
  exit 1
fi
torch_dir=$("${python}" -c 'import os, torch; print(os.path.dirname(torch.__file__))')

# The bundle unpacks with Python's tarfile: the GPU machine may lack the xz program.
if ! "${python}" -c '
import sys, tarfile
safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **safe)' "${bundle}/bundle.tar.xz" "${work}"; then
  echo "run.sh: cannot unpack ${bundle}/bundle.tar.xz (run benchmarks/gpu/make_bundle.sh)" >&2
  exit 1
fi
bin=${work}/bin
# Our binaries load the bundle's libraries and the wheel's LibTorch. Only they get this path:
# the machine's own programs (Python included) keep their own versions of the libraries.
lib_path=${work}/lib:${torch_dir}/lib
for d in "$(dirname "${torch_dir}")"/nvidia/*/lib; do [[ -d "${d}" ]] && lib_path+=:${d}; done
lib_path+=${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}
bundled=(env LD_LIBRARY_PATH="${lib_path}")

echo "bundle: $(sed -n 2p "${work}/MANIFEST.txt" | sed 's/^built: //')"
sed -n 4p "${work}/MANIFEST.txt"
echo "python: ${python} (torch $("${python}" -c 'import torch; print(torch.__version__)'))"
if ((cpu)); then
  echo "mode: --cpu (CPU fallbacks, tiny sizes)"
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
    sed 's/^/gpu: /'
fi
echo "logs: ${logs}"

names=() statuses=() times=() peaks=() results=()

# part NAME LIMIT_SECONDS COMMAND...: runs COMMAND (stdout and stderr to $logs/NAME.log) under
# timeout, sampling the GPU's used memory meanwhile; records status, time and peak memory.
part() {
  local name=$1 limit=$2
  shift 2
  local log="${logs}/${name// /_}.log" left=$((budget - (SECONDS - began)))
  names+=("${name}")
  skipped=0
  if [[ -n "${parts}" && "${name}" != preflight && "${parts}" != *",${name%% *},"* ]]; then
    skipped=2
    statuses+=("-") times+=("-") peaks+=("-")
    return 1
  fi
  if ((left < 15)); then
    skipped=1
    statuses+=("SKIPPED") times+=("-") peaks+=("-")
    echo "== ${name}: skipped, out of time"
    return 1
  fi
  ((limit > left)) && limit=${left}
  local sampler="" smi="${log%.log}.smi"
  if ((!cpu)) && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"${smi}" \
      2>/dev/null &
    sampler=$!
  fi
  local t0=${SECONDS} rc
  timeout -k 10 "${limit}" "$@" >"${log}" 2>&1
  rc=$?
  local took=$((SECONDS - t0)) peak="-"
  if [[ -n "${sampler}" ]]; then
    kill "${sampler}" 2>/dev/null
    wait "${sampler}" 2>/dev/null
    peak=$(sort -n "${smi}" | tail -n 1)
    peak=${peak:--}
  fi
  times+=("${took}s") peaks+=("${peak}")
  if ((rc == 0)); then
    statuses+=("ok")
    echo "== ${name}: ok (${took}s)"
  else
    ((rc == 124 || rc == 137)) && statuses+=("TIMEOUT") || statuses+=("FAIL(${rc})")
    echo "== ${name}: ${statuses[-1]} after ${took}s; last lines of ${log}:"
    tail -n 15 "${log}" | cut -c1-200 | sed 's/^/   | /'
  fi
  return "${rc}"
}
# The result column of the last part: what its log says, unless it never ran.
skipped=0
result() {
  case "${skipped}" in
    1) results+=("out of time (--budget=${budget})") ;;
    2) results+=("not in --parts") ;;
    *) results+=("$1") ;;
  esac
}
log_of() { echo "${logs}/${1// /_}.log"; }

# 1. Every binary and bundled library finds its libraries here (a function run by `timeout`
# through bash, hence exported with what it reads).
preflight() {
  local bad=0 f
  for f in "${bin}"/* "${bin}"/ops/* "${bin}"/cuda_tests/* "${work}"/lib/*; do
    [[ -f "${f}" ]] || continue
    if LD_LIBRARY_PATH=${lib_path} ldd "${f}" | grep -q "not found"; then
      echo "${f##*/}:"; LD_LIBRARY_PATH=${lib_path} ldd "${f}" | grep "not found"; bad=1
    fi
  done
  ((cpu)) || "${python}" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"'
  return "${bad}"
}
export -f preflight
export bin work cpu python lib_path
if part "preflight" 60 bash -c preflight; then
  result "$(find "${bin}" "${work}/lib" -type f | wc -l) files, every library resolves"
else
  result "missing libraries or no GPU: see $(log_of preflight)"
fi

# 2. CUDA operators against their CPU results (they skip, saying so, where no GPU is).
ops=("${bin}"/ops/*)
if [[ ! -f "${ops[0]}" ]]; then
  names+=("ops") statuses+=("none") times+=("-") peaks+=("-")
  result "no cc_test under //models/ops when the bundle was built"
fi
for t in "${ops[@]}"; do
  [[ -f "${t}" ]] || continue
  part "ops ${t##*/}" 90 "${bundled[@]}" TEST_TMPDIR="${work}/tmp" "${t}"
  log=$(log_of "ops ${t##*/}")
  result "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "${log}" 2>/dev/null |
    sed 's/\[ *\([A-Z]*\) *\] \([0-9]* tests*\).*/\1 \2/' | paste -sd';')"
done

# 2b. The model and engine tests with CUDA cases (the whole DBNet, Mask R-CNN and DANet against
# the CPU; Mask R-CNN's anchor generator, RPN and RoI heads against torchvision's goldens; the
# multi-tensor optimizers; make_bundle.sh lists them), CUDA cases only. The goldens are read from
# the working tree (models/<model>/testdata), hence from the repository root.
model_tests=("${bin}"/cuda_tests/*)
if [[ ! -f "${model_tests[0]}" ]]; then
  names+=("cuda tests") statuses+=("none") times+=("-") peaks+=("-")
  result "no model test with CUDA cases when the bundle was built"
fi
for t in "${model_tests[@]}"; do
  [[ -f "${t}" ]] || continue
  part "cuda ${t##*/}" 120 "${bundled[@]}" TEST_TMPDIR="${work}/tmp" "${t}" \
    --gtest_filter='*Cuda*:*CUDA*'
  log=$(log_of "cuda ${t##*/}")
  result "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "${log}" 2>/dev/null |
    sed 's/\[ *\([A-Z]*\) *\] \([0-9]* tests*\).*/\1 \2/' | paste -sd';')"
done

# 3. DBNet-ResNet-18 training step (forward, losses, backward, SGD), ours then PyTorch's, per
# precision; the same flags on both sides.
if ((cpu)); then
  step_args=(--device=cpu --batch=2 --size=64 --steps=2 --warmup=1 --profile_steps=1)
else
  step_args=(--device=cuda --batch=16 --size=640 --steps=20 --warmup=5 --cudnn_benchmark=true
             --profile_steps=3)
fi
step_args+=(--optimizer=sgd)
summary_of() { grep -m1 '^summary:' "$1" 2>/dev/null | cut -d' ' -f2-; }
short() { echo "${1:-no summary line}" | sed 's/device=[^ ]* amp=[^ ]* //'; }
declare -A step_summary=()
# precision_flags LABEL: the flags of a precision column. "bf16cl" is bf16 with the weights and
# images channels-last on both sides (TrainPipelineConfig.memory_format; torch.channels_last):
# how cuDNN's tensor-core convolutions run without layout conversions.
precision_flags() {
  case "$1" in
    fp32) echo --amp=none ;;
    bf16cl) echo --amp=bf16 --channels_last=true ;;
    *) echo --amp="$1" ;;
  esac
}
for label in fp32 bf16 fp16 bf16cl; do
  read -r -a flags <<<"$(precision_flags "${label}")"
  part "dbnet ${label} ours" 90 "${bundled[@]}" "${bin}/activation_memory_benchmark" \
    "${step_args[@]}" "${flags[@]}"
  step_summary[ours_${label}]=$(summary_of "$(log_of "dbnet ${label} ours")")
  result "$(short "${step_summary[ours_${label}]}")"
  part "dbnet ${label} python" 90 "${python}" "${work}/peers/dbnet_peer.py" "${step_args[@]}" \
    "${flags[@]}"
  step_summary[python_${label}]=$(summary_of "$(log_of "dbnet ${label} python")")
  result "$(short "${step_summary[python_${label}]}")"
done

# 3b. DANet training step (dilated ResNet-50 at output stride 8, the attention head, three
# cross-entropy losses, backward, SGD), ours then PyTorch's, in fp32 and bf16 (the paper's
# 768x768 crops, 2 per GPU); the same flags on both sides.
if ((cpu)); then
  danet_args=(--device=cpu --depth=18 --batch=2 --height=64 --width=64 --steps=2 --warmup=1
              --profile_steps=1)
else
  danet_args=(--device=cuda --depth=50 --batch=2 --height=768 --width=768 --steps=10 --warmup=3
              --cudnn_benchmark=true --profile_steps=2)
fi
for label in fp32 bf16 bf16cl; do
  read -r -a flags <<<"$(precision_flags "${label}")"
  part "danet ${label} ours" 90 "${bundled[@]}" "${bin}/danet_step_benchmark" \
    "${danet_args[@]}" "${flags[@]}"
  step_summary[danet_ours_${label}]=$(summary_of "$(log_of "danet ${label} ours")")
  result "$(short "${step_summary[danet_ours_${label}]}")"
  part "danet ${label} python" 90 "${python}" "${work}/peers/danet_peer.py" "${danet_args[@]}" \
    "${flags[@]}"
  step_summary[danet_python_${label}]=$(summary_of "$(log_of "danet ${label} python")")
  result "$(short "${step_summary[danet_python_${label}]}")"
done

# 3c. Mask R-CNN R50-FPN training step (torchvision's architecture, frozen BatchNorm, layers 2-4
# trained; forward with the RPN and RoI losses, backward, SGD) on the peer's seeded weights and
# batch of 800x800 images with 6 instances each, 2 per GPU, ours then torchvision's, fp32 and
# bf16. The peer writes the weights and the batch first (on the CPU).
# (--cpu: fp32 only; CPU bf16 convolutions take minutes here.)
if ((cpu)); then
  mask_size=128
  mask_args=(--steps=2 --warmup=1 --gpu_profile_steps=1)
  mask_labels=(fp32)
else
  mask_size=800
  mask_args=(--device=cuda --steps=10 --warmup=3 --cudnn_benchmark=true --gpu_profile_steps=2)
  mask_labels=(fp32 bf16 bf16cl)
fi
mkdir -p "${work}/mask_rcnn_case"
part "maskrcnn case" 60 "${python}" "${work}/peers/mask_rcnn_peer.py" --size="${mask_size}" \
  --batch=2 --write="${work}/mask_rcnn_case"
result "weights.pt and case.pt, ${mask_size}x${mask_size}, 2 images"
for label in "${mask_labels[@]}"; do
  read -r -a flags <<<"$(precision_flags "${label}")"
  part "maskrcnn ${label} ours" 90 "${bundled[@]}" "${bin}/mask_rcnn_benchmark" \
    --dir="${work}/mask_rcnn_case" "${mask_args[@]}" "${flags[@]}" --inference=false
  step_summary[mask_ours_${label}]=$(summary_of "$(log_of "maskrcnn ${label} ours")")
  result "$(short "${step_summary[mask_ours_${label}]}")"
  part "maskrcnn ${label} python" 90 "${python}" "${work}/peers/mask_rcnn_peer.py" \
    --size="${mask_size}" --batch=2 "${mask_args[@]}" "${flags[@]}" --inference=false
  step_summary[mask_python_${label}]=$(summary_of "$(log_of "maskrcnn ${label} python")")
  result "$(short "${step_summary[mask_python_${label}]}")"
done

# 3d. The DBNet and DANet steps replayed from a CUDA graph, in bf16 channels-last (the fastest
# eager configuration): after the warm-up, one step is captured, one replay is checked against
# one eager step from the same state (loss and parameter update within 1e-2), then replays are
# timed (models/testing/step_benchmark.h CapturedStep); compared below with PyTorch's eager
# bf16cl step. Not with --cpu: CUDA graphs need a GPU.
if ((!cpu)); then
  read -r -a flags <<<"$(precision_flags bf16cl)"
  part "dbnet graph ours" 90 "${bundled[@]}" "${bin}/activation_memory_benchmark" \
    "${step_args[@]}" "${flags[@]}" --cuda_graph=true
  log=$(log_of "dbnet graph ours")
  step_summary[ours_graph]=$(summary_of "${log}")
  result "$(grep -m1 '^cuda graph' "${log}" 2>/dev/null | cut -c1-150); $(short "${step_summary[ours_graph]}")"
  part "danet graph ours" 90 "${bundled[@]}" "${bin}/danet_step_benchmark" \
    "${danet_args[@]}" "${flags[@]}" --cuda_graph=true
  log=$(log_of "danet graph ours")
  step_summary[danet_ours_graph]=$(summary_of "${log}")
  result "$(grep -m1 '^cuda graph' "${log}" 2>/dev/null | cut -c1-150); $(short "${step_summary[danet_ours_graph]}")"
fi

# 4. A process group of world size 1 through the bucketed strategy: NCCL on the GPU (Gloo with
# --cpu). One rank communicates nothing in "bucketed"; "collectives" all-reduces buffers of its
# bucket sizes through the backend.
port=$("${python}" -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
if ((cpu)); then
  comm_args=(--device=cpu --backend=gloo --steps=3 --warmup=1)
else
  comm_args=(--device=cuda --backend=nccl --steps=20 --warmup=3 --batch=32 --image_size=64)
fi
part "comm world 1" 90 "${bundled[@]}" "${bin}/comm_benchmark" --rank=0 --world=1 \
  --master_port="${port}" --configs=none,collectives,bucketed "${comm_args[@]}"
result "$(grep -E 'ms/step' "$(log_of "comm world 1")" 2>/dev/null |
  awk '{printf "%s %s ms/step; ", $1, $4}')"

# 4b. Does NCCL's bucket all-reduce overlap backward? One rank, the bucketed strategy told to
# all-reduce anyway (--communicate_at_world_one), 5 traced steps; benchmarks/trace_overlap.py
# then measures the device's all-reduce spans (CUDA events) against the backward span.
port=$("${python}" -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
mkdir -p "${work}/comm_trace"
if ((cpu)); then
  overlap_args=(--device=cpu --backend=gloo --steps=2 --warmup=1 --bucket_cap_mb=0.25)
else
  overlap_args=(--device=cuda --backend=nccl --steps=10 --warmup=3 --batch=32 --image_size=224
                --model=resnet18 --bucket_cap_mb=25)
fi
# The run, then the summary of its trace (one bash under `timeout`, as every part).
part "comm overlap world 1" 120 bash -c \
  'trace=$1 py=$2 overlap_py=$3; shift 3; "$@" && "${py}" "${overlap_py}" "${trace}"' _ \
  "${work}/comm_trace/bucketed_world1_trace_rank0.json" "${python}" \
  "${repo}/benchmarks/trace_overlap.py" \
  "${bundled[@]}" "${bin}/comm_benchmark" --rank=0 --world=1 --master_port="${port}" \
  --configs=bucketed --communicate_at_world_one --trace_dir="${work}/comm_trace" \
  --trace_steps=5 "${overlap_args[@]}"
log=$(log_of "comm overlap world 1")
share=$(grep -o 'hidden share (collective time inside backward / collective time): [0-9]*%' \
  "${log}" 2>/dev/null | grep -o '[0-9]*%$')
if [[ -z "${share}" ]]; then
  result "no bucket all-reduce spans in the trace: see ${log}"
elif [[ "${share}" == 0% ]]; then
  result "bucket all-reduces do NOT overlap backward (0% of their time inside it)"
else
  result "bucket all-reduces overlap backward: ${share} of their time inside it"
fi

# 5. The quick start (tools/quickstart.sh's data, models/dbnet/configs/quickstart.pbtxt) for
# 200 steps on the GPU in one process, then its held-out hmean.
qs=${work}/quickstart
mkdir -p "${qs}"
mapfile -t data_args < <(grep -o -- '--\(num_train\|num_test\|width\|height\|seed\)=[0-9]*' \
  tools/quickstart.sh)
if ((cpu)); then
  data_args+=(--num_train=16 --num_test=4 --width=128 --height=128)  # later flags win
  train_args=(--override='device: "cpu"' --override='train { max_steps: 4 }'
              --override='evaluation { every_n_steps: 4 }')
else
  train_args=(--override='device: "cuda"' --override='train { max_steps: 200 }'
              --override='evaluation { every_n_steps: 200 }'
              --override='train_data { loader { num_workers: 4 } }')
fi
part "quickstart data" 120 "${bundled[@]}" "${bin}/make_synthetic_text" \
  --output_dir="${qs}/data_cache/synthetic_text" "${data_args[@]}"
result "$(tail -n 1 "$(log_of "quickstart data")" 2>/dev/null | cut -c1-80)"
# The config names its data relatively (data_cache/synthetic_text): run where the data is.
part "quickstart train" 240 bash -c 'cd "$1" && shift && exec "$@"' _ "${qs}" \
  "${bundled[@]}" "${bin}/train" --config="${repo}/models/dbnet/configs/quickstart.pbtxt" \
  "${train_args[@]}" \
  --override='checkpoint { output_dir: "run" every_n_steps: 1000 }'
log=$(log_of "quickstart train")
result "$(grep '^eval at step' "${log}" 2>/dev/null | tail -n 1); $(grep -o '^trained .* img/s' \
  "${log}" 2>/dev/null | tail -n 1)"

# compare TITLE GOAL (LABEL OURS_SUMMARY PYTHON_SUMMARY)...: one model's step against PyTorch's
# per precision: images/s, the ratio against the goal, peak allocated memory, host-device
# synchronisations per step, ms per phase.
compare() {
  "${python}" - "$@" <<'PY'
import sys

def parse(summary):
    return dict(kv.split("=", 1) for kv in summary.split() if "=" in kv)

def speed(d):
    return f"{float(d['images/s']):.1f}" if "images/s" in d else "failed"

def pair(o, p, key, fmt):
    return "/".join(fmt.format(float(d[key])) if key in d else "-" for d in (o, p))

title, goal, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"{title:<21} ours img/s  python img/s  ours/python (goal >= {goal})  "
      "peak alloc MiB ours/python  syncs/step ours/python")
for label, ours, python in zip(rows[0::3], rows[1::3], rows[2::3]):
    o, p = parse(ours), parse(python)
    ratio = (f"{float(o['images/s']) / float(p['images/s']):.2f}"
             if "images/s" in o and "images/s" in p else "-")
    print(f"{label:<21} {speed(o):>11} {speed(p):>13}  {ratio:>11}                "
          f"{pair(o, p, 'peak_allocated_mib', '{:.0f}'):>14}  "
          f"{pair(o, p, 'syncs_per_step', '{:g}'):>21}")
    for side, d in (("ours", o), ("python", p)):
        keys = ("forward_ms", "backward_ms", "optimizer_ms", "step_ms")
        phases = ", ".join(f"{k[:-3]} {float(d[k]):.1f}" for k in keys if k in d)
        if phases:
            print(f"    {side:<7} ms per step: {phases}")
PY
}

# The table, then the models' comparisons and where their time goes.
report() {
  local i
  printf '\n%-22s %-10s %6s %9s  %s\n' part status time "GPU MiB" result
  for i in "${!names[@]}"; do
    printf '%-22s %-10s %6s %9s  %s\n' "${names[i]}" "${statuses[i]}" "${times[i]}" \
      "${peaks[i]}" "${results[i]}"
  done
  echo "(GPU MiB: the most nvidia-smi saw in use on the GPU during the part, CUDA context included)"
  echo
  # The CUDA-graph replays (part 3d) against PyTorch's eager bf16cl step; not run with --cpu.
  local dbnet_graph_row=() danet_graph_row=()
  if ((!cpu)); then
    dbnet_graph_row=(bf16cl+graph "${step_summary[ours_graph]:-}" "${step_summary[python_bf16cl]:-}")
    danet_graph_row=(bf16cl+graph "${step_summary[danet_ours_graph]:-}"
                     "${step_summary[danet_python_bf16cl]:-}")
  fi
  compare "DBNet-R18 train step" 1.2 \
    fp32 "${step_summary[ours_fp32]:-}" "${step_summary[python_fp32]:-}" \
    bf16 "${step_summary[ours_bf16]:-}" "${step_summary[python_bf16]:-}" \
    fp16 "${step_summary[ours_fp16]:-}" "${step_summary[python_fp16]:-}" \
    bf16cl "${step_summary[ours_bf16cl]:-}" "${step_summary[python_bf16cl]:-}" \
    "${dbnet_graph_row[@]}"
  echo
  compare "DANet-R50 train step" 1.1 \
    fp32 "${step_summary[danet_ours_fp32]:-}" "${step_summary[danet_python_fp32]:-}" \
    bf16 "${step_summary[danet_ours_bf16]:-}" "${step_summary[danet_python_bf16]:-}" \
    bf16cl "${step_summary[danet_ours_bf16cl]:-}" "${step_summary[danet_python_bf16cl]:-}" \
    "${danet_graph_row[@]}"
  echo
  compare "Mask R-CNN train step" 1.0 \
    fp32 "${step_summary[mask_ours_fp32]:-}" "${step_summary[mask_python_fp32]:-}" \
    bf16 "${step_summary[mask_ours_bf16]:-}" "${step_summary[mask_python_bf16]:-}" \
    bf16cl "${step_summary[mask_ours_bf16cl]:-}" "${step_summary[mask_python_bf16cl]:-}"
  echo
  echo "Host-device synchronisations per step by call site (ours: the operator and our function"
  echo "that called it; python: the line that called it; README.md of benchmarks/gpu says which"
  echo "ones the reference trainers need too):"
  for model in dbnet danet maskrcnn; do
    for label in fp32 bf16cl; do
      for side in ours python; do
        local f
        f=$(log_of "${model} ${label} ${side}")
        [[ -f "${f}" ]] || continue
        grep '^sync site:' "${f}" | cut -c1-160 | sed "s/^sync site:/  ${model} ${label} ${side}:/"
      done
    done
  done
  echo
  echo "Where the steps' time goes (profiled steps; full lists in ${logs}/{dbnet,danet,maskrcnn}_*.log):"
  for model in dbnet danet maskrcnn; do
    for label in fp32 bf16 fp16 bf16cl; do
      for side in ours python; do
        local f
        f=$(log_of "${model} ${label} ${side}")
        [[ -f "${f}" ]] || continue
        grep -A 6 '^profile:' "${f}" | cut -c1-120 | sed "1s/^/${model} ${label} ${side}: /"
      done
    done
  done
}
report | tee "${logs}/summary.txt"
failed=0
for s in "${statuses[@]}"; do
  [[ "${s}" == ok || "${s}" == none || "${s}" == - ]] || failed=$((failed + 1))
done
echo "total $((SECONDS - began))s; ${failed} part(s) not ok"
rm -rf "${work}/bin" "${work}/lib"
exit $((failed > 0))
