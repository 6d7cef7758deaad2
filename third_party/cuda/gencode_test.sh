#!/usr/bin/env bash
# Checks that a cuda_library object holds SASS for sm_80 and sm_90 and compute_90 PTX, nothing
# more: without the PTX, GPUs newer than sm_90 fail at the first kernel launch, and each extra
# architecture costs a device compilation of every file.
# Usage: gencode_test.sh <object> <cuobjdump candidates...> (the first that exists is used)
set -euo pipefail
source tools/testing/expect.sh
object="$1"
shift
cuobjdump=""
for candidate in "$@"; do
  if [[ -x "$candidate" ]]; then cuobjdump="$candidate"; break; fi
done
if [[ -z "$cuobjdump" ]]; then
  echo "cuobjdump not found (looked at: $*); install NVIDIA's cuda-cuobjdump-13-0 package" >&2
  exit 1
fi
elf="$("$cuobjdump" --list-elf "$object")"
ptx="$("$cuobjdump" --list-ptx "$object")"
status=0
for arch in sm_80 sm_90; do
  grep -q "\.${arch}\.cubin" <<<"$elf" || { echo "no ${arch} SASS in ${object}"; status=1; }
done
grep -q "\.sm_90\.ptx" <<<"$ptx" || { echo "no compute_90 PTX in ${object}"; status=1; }
[[ "$(grep -c 'cubin' <<<"$elf")" == 2 ]] || { echo "expected exactly 2 cubins"; status=1; }
[[ "$(grep -c 'ptx' <<<"$ptx")" == 1 ]] || { echo "expected exactly 1 PTX"; status=1; }
if [[ "$status" != 0 ]]; then printf '%s\n%s\n' "$elf" "$ptx"; fi
exit "$status"
