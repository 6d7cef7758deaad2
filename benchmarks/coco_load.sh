#!/usr/bin/env bash
# Opening COCO's train2017 annotations at full size, ours against pycocotools, in one command:
#   bash benchmarks/coco_load.sh [--images=118287 --no-reference]
# The file: a train2017-shaped instances JSON without images
# (//data/synthetic/coco:make_coco_scale_annotations: 118,287 images, ~850,000 annotations
# with polygons and crowd RLE, COCO's 80 category ids), written once and kept in
# ${COCO_LOAD_DIR:-/tmp/vision-coco-load}.
# Runs, each a fresh process on the same file (already in the page cache for everyone):
#   python        pycocotools' COCO(file): json.load and its index (benchmarks/coco_load_peer.py)
#   nlohmann      our reader before the compact index (a JSON tree; skipped by --no-reference)
#   parse         ours with CocoOptions.cache OFF: simdjson into the compact index
#   cold / warm   ours with a cache directory: the first load builds the cache, the next maps it
#   cold x2 / warm x2  the same with two processes started together (one builds, the other
#                 waits on the lock and maps; both measured while both map the cache)
# Prints wall and CPU seconds (CPU holds better on a shared machine), peak RSS, and for ours
# the RSS after loading split into private and shared pages, and Pss (the node's RAM per
# process: a page shared by two counts half in each), then the ratios against python.
# BAZEL names the bazel command (default: bazel).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benchmarks/peer_python.sh
images=118287 reference=1
for arg in "$@"; do
  case "${arg}" in
    --images=*) images=${arg#*=} ;;
    --no-reference) reference=0 ;;
    *) echo "unknown argument ${arg}; see the usage at the top of $0" >&2; exit 2 ;;
  esac
done
read -r -a bazel <<< "${BAZEL:-bazel}"
log=$(mktemp)
work=$(mktemp -d)
trap 'rm -rf "${work}" "${log}"' EXIT
"${bazel[@]}" build -c opt //data/synthetic/coco:make_coco_scale_annotations \
  //data/datasets/coco:coco_load_benchmark >"${log}" 2>&1 || { cat "${log}"; exit 1; }
bin=$("${bazel[@]}" info -c opt bazel-bin 2>/dev/null)
data=${COCO_LOAD_DIR:-/tmp/vision-coco-load}
json=${data}/instances_train2017_shaped_${images}.json
mkdir -p "${data}"
if [[ ! -f "${json}" ]]; then
  "${bin}/data/synthetic/coco/make_coco_scale_annotations" --output="${json}" \
    --num_images="${images}"
fi
echo "file: ${json} ($(( $(stat -c %s "${json}") / 1000000 )) MB)"
load() { "${bin}/data/datasets/coco/coco_load_benchmark" --annotations="${json}" "$@"; }
# Two processes started together; prints both lines.
load_two() {
  local sync
  sync=$(mktemp -d -p "${work}")
  load "$@" --ranks=2 --sync_dir="${sync}" --label=r0 >"${sync}.0" &
  load "$@" --ranks=2 --sync_dir="${sync}" --label=r1 >"${sync}.1" &
  wait
  cat "${sync}.0" "${sync}.1"
}
results=${work}/results
{
  "${peer_python}" benchmarks/coco_load_peer.py "${json}"
  if (( reference )); then load --reader=reference --label=nlohmann; fi
  load --cache=OFF --label=parse
  load --cache_dir="${work}/cache1" --label=cold
  load --cache_dir="${work}/cache1" --label=warm
  load_two --cache_dir="${work}/cache2" | sed 's/^r/cold_x2_r/'
  load_two --cache_dir="${work}/cache2" | sed 's/^r/warm_x2_r/'
} | tee "${results}"
echo
"${peer_python}" - "${results}" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    fields = line.split("|")[0].split()
    rows[fields[0]] = {k: float(v) for k, v in zip(fields[1::2], fields[2::2])}
py = rows["python"]
print(f"{'':12} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} {'rss MiB':>8} {'private':>8} "
      f"{'shared':>7} {'Pss':>6}   python/ours: {'wall':>5} {'cpu':>5} {'peak':>5}")
for name, r in rows.items():
    extra = "".join(f" {r[k]:>{w}.0f}" if k in r else f" {'-':>{w}}"
                    for k, w in (("rss_mib", 8), ("private_mib", 8), ("shared_mib", 7),
                                 ("pss_mib", 6)))
    ratio = "" if name == "python" else (
        f"{py['seconds'] / r['seconds']:>17.1f} {py['cpu_seconds'] / r['cpu_seconds']:>5.1f}"
        f" {py['peak_rss_mib'] / r['peak_rss_mib']:>5.1f}")
    print(f"{name:12} {r['seconds']:8.2f} {r['cpu_seconds']:8.2f} {r['peak_rss_mib']:9.0f}"
          f"{extra}  {ratio}")
parse, warm = rows["parse"], rows["warm"]
warm2 = [rows["warm_x2_r0"], rows["warm_x2_r1"]]
print(f"\ncold parse: {py['seconds'] / parse['seconds']:.1f}x python's wall time, "
      f"{py['cpu_seconds'] / parse['cpu_seconds']:.1f}x its CPU time (goal: 5x)")
print(f"warm load: {warm['seconds']:.2f} s (goal: < 1 s)")
print(f"peak RSS per rank, warm: {max(r['peak_rss_mib'] for r in warm2):.0f} MiB = "
      f"{max(r['peak_rss_mib'] for r in warm2) / py['peak_rss_mib']:.2f} of python's "
      f"{py['peak_rss_mib']:.0f} (goal: <= 0.25); cold builder: {rows['cold']['peak_rss_mib']:.0f}"
      f" MiB = {rows['cold']['peak_rss_mib'] / py['peak_rss_mib']:.2f}")
print(f"two warm ranks hold {sum(r['pss_mib'] for r in warm2):.0f} MiB of the node's RAM (sum of"
      f" Pss; the mapped cache counted once), python would hold {2 * py['peak_rss_mib']:.0f}")
PY
