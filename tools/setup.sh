#!/usr/bin/env bash
# Installs what the project needs and is missing:
#  1. every Debian package listed in tools/packages.txt;
#  2. a Python virtual environment outside the work tree ($VISION_VENV, default
#     ~/.cache/vision-train/venv) with tools/python_requirements.txt: the torch wheel there is
#     the LibTorch the build links, so clean clones and CI reuse it.
# Idempotent: when everything is present it only checks and exits (well under a second).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then sudo_cmd=(sudo); fi

mapfile -t wanted < <(grep -v -E '^\s*(#|$)' "${here}/packages.txt")
missing=()
for pkg in "${wanted[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null || true)"
  [[ "${status}" == "install ok installed" ]] || missing+=("${pkg}")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#wanted[@]} Debian packages present"
else
  echo "setup: installing ${#missing[@]} missing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

venv="${VISION_VENV:-${HOME}/.cache/vision-train/venv}"
requirements="${here}/python_requirements.txt"
stamp="${venv}/.vision-requirements"
if [[ -x "${venv}/bin/python3" ]] && cmp -s "${requirements}" "${stamp}"; then
  echo "setup: Python environment ${venv} is up to date"
  exit 0
fi
if [[ ! -x "${venv}/bin/python3" ]]; then
  echo "setup: creating the Python environment ${venv}"
  mkdir -p "$(dirname "${venv}")"
  python3 -m venv "${venv}" || {
    echo "setup: 'python3 -m venv' failed; install python3-venv (Debian) and run again" >&2
    exit 1
  }
fi
echo "setup: installing tools/python_requirements.txt into ${venv} (torch with CUDA: several GB)"
"${venv}/bin/python3" -m pip install --no-input -q --disable-pip-version-check -r "${requirements}"
cp "${requirements}" "${stamp}"
echo "setup: Python environment ready; torch $("${venv}/bin/python3" -c 'import torch; print(torch.__version__)')"
