#!/usr/bin/env bash
# //tools/export:onnx end to end: checkpoint -> ONNX -> onnxruntime -> compared with OUR C++
# model's outputs on the same images (kept with --bundle_dir and checked again here by
# testdata/check_onnx.py and check_onnx_detections.py, independently of the exporter's own
# check), for a tiny DBNet, a tiny DBNet with deformable convolutions (ONNX DeformConv), a tiny
# DANet and a tiny Mask R-CNN's whole inference (ONNX NonMaxSuppression and RoiAlign; its
# detections matched with ours), with dynamic sizes checked at two sizes; the plain DBNet as a
# fixed-size export. The checkpoints are randomised
# (make_test_checkpoint --randomize) so that offsets, attention gammas and BatchNorm statistics
# count. Bad input: a refusal with a message, exit code 1 and no file.
# Arguments (from BUILD.bazel): <onnx binary> <make_test_checkpoint> <python> <script>.
set -euo pipefail
source tools/testing/expect.sh
onnx_bin="$1"
make_checkpoint="$2"
python="$3"
script="$4"
t="${TEST_TMPDIR}"
tolerance=1e-4

export_and_check() {  # <name> <config> <mode> <flags...>
  local name="$1" config="$2" mode="$3"
  shift 3
  "${make_checkpoint}" --config="${config}" --output="${t}/${name}.pt" --randomize >/dev/null
  "${onnx_bin}" --python="${python}" --script="${script}" --config="${config}" \
    --checkpoint="${t}/${name}.pt" --output="${t}/${name}.onnx" --bundle_dir="${t}/${name}" \
    "$@" >"${t}/${name}.log" 2>&1 || { cat "${t}/${name}.log"; exit 1; }
  grep -E "max abs diff|^wrote" "${t}/${name}.log"
  expect_grep -F "wrote ${t}/${name}.onnx (opset 19" "${t}/${name}.log"
  if [[ "${mode}" == detections ]]; then
    "${python}" tools/export/testdata/check_onnx_detections.py "${t}/${name}.onnx" "${t}/${name}" \
      "${tolerance}" | tee "${t}/${name}.check"
  else
    "${python}" tools/export/testdata/check_onnx.py "${t}/${name}.onnx" "${t}/${name}" \
      "${mode}" "${tolerance}" | tee "${t}/${name}.check"
  fi
  expect_grep -F "PASS" "${t}/${name}.check"
}

export_and_check dbnet tools/export/testdata/dbnet_tiny.pbtxt fixed --size=64x96 --fixed_size
expect_grep -F "fixed 64x96" "${t}/dbnet.log"
expect_eq 3 "$(grep -c '^CHECK DBNet' "${t}/dbnet.check")" "DBNet: 3 maps at its one size"

export_and_check dbnet_dcn tools/export/testdata/dbnet_dcn_tiny.pbtxt dynamic --size=64x64 \
  --check_size=128x96
expect_grep -F "onnxruntime equals ours on 2 size(s)" "${t}/dbnet_dcn.log"
expect_eq 6 "$(grep -c '^CHECK DBNet' "${t}/dbnet_dcn.check")" "DCN DBNet: 3 maps x 2 sizes"
"${python}" -c "import onnx, sys; ops = {n.op_type for n in onnx.load(sys.argv[1]).graph.node}; \
assert 'DeformConv' in ops, sorted(ops)" "${t}/dbnet_dcn.onnx"

export_and_check danet tools/export/testdata/danet_tiny.pbtxt dynamic --size=64x64 \
  --check_size=96x128
expect_eq 2 "$(grep -c '^CHECK DANet logits' "${t}/danet.check")" "DANet: logits at 2 sizes"

# Traced on a padded batch of two 96x128 images (100 detections each, the cap); checked again
# on one 40x48 image, where P6 is 1x1 and fewer than 1000 candidates take ops::BatchedNms's
# coordinate-shift path (at 96x128, the RPN's and the box head's NMS take the per-class path).
export_and_check mask_rcnn tools/export/testdata/mask_rcnn_tiny.pbtxt detections --size=96x128 \
  --check_size=40x48
expect_eq 2 "$(grep -c '^CHECK MaskRCNN' "${t}/mask_rcnn.check")" "Mask R-CNN: 2 cases"
matched="$(sed -n 's/^PASS .*: \([0-9]*\) detections matched.*/\1/p' "${t}/mask_rcnn.check")"
expect_true "Mask R-CNN: at least 200 detections matched, got '${matched}'" \
  test "${matched:-0}" -ge 200

# refuses <name> <expected message> <command...>: exit code 1, the message on stderr, no file
# and no temporary one beside it.
refuses() {
  local name="$1" message="$2" rc=0
  shift 2
  "$@" >"${t}/${name}.out" 2>"${t}/${name}.err" || rc=$?
  expect_eq 1 "${rc}" "${name}: exit code"
  expect_grep -F "${message}" "${t}/${name}.err"
  expect_true "${name}: no output file" test ! -e "${t}/${name}.onnx"
  expect_true "${name}: no temporary file" bash -c "! ls '${t}'/tmp*.onnx 2>/dev/null"
}
refuses bad_size "error: --size='64': give HEIGHTxWIDTH" \
  "${onnx_bin}" --python="${python}" --script="${script}" \
  --config=tools/export/testdata/dbnet_tiny.pbtxt --checkpoint="${t}/dbnet.pt" \
  --output="${t}/bad_size.onnx" --size=64
# The comparison with our outputs decides: an impossible tolerance writes nothing.
refuses too_strict "onnxruntime's outputs differ from ours by" \
  "${onnx_bin}" --python="${python}" --script="${script}" \
  --config=tools/export/testdata/dbnet_tiny.pbtxt --checkpoint="${t}/dbnet.pt" \
  --output="${t}/too_strict.onnx" --size=64x64 --fixed_size --tolerance=1e-12
expect_grep -F "onnx_export.py exit status 1; its message is above); nothing written" \
  "${t}/too_strict.err"
# Mask R-CNN traced with a 1x1 pyramid level would be specialised to it.
refuses mask_rcnn_small "error: Mask R-CNN with dynamic sizes is traced on an image larger than" \
  "${onnx_bin}" --python="${python}" --script="${script}" \
  --config=tools/export/testdata/mask_rcnn_tiny.pbtxt --checkpoint="${t}/mask_rcnn.pt" \
  --output="${t}/mask_rcnn_small.onnx" --size=64x96
# The Python half on a bundle of a model it has no definition of.
cp -r "${t}/dbnet" "${t}/unknown"
sed -i 's/"model": "DBNet"/"model": "DBNett"/' "${t}/unknown/spec.json"
refuses unknown "error: no ONNX export for model 'DBNett'; supported: DANet, DBNet, MaskRCNN" \
  "${python}" "${script}" --bundle="${t}/unknown" --output="${t}/unknown.onnx"
echo "PASS"
