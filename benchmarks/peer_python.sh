# Sourced by the benchmark scripts: the Python that runs the peers, the project's environment
# from tools/setup.sh (PyPI torch==2.11.0, torchvision==0.26.0: current PyTorch, the same
# LibTorch our side links).
peer_python="${VISION_VENV:-${HOME}/.cache/vision-train/venv}/bin/python3"
if [[ ! -x "${peer_python}" ]]; then
  echo "benchmarks: ${peer_python} not found; run tools/setup.sh first" >&2
  exit 1
fi
