#!/usr/bin/env bash
# //tools/export:export end to end: what it prints for a good run (EMA by default, live on
# request), and bad input refused with a message naming the fix, exit code 1 and no file.
# Arguments (from BUILD.bazel): <export binary> <make_test_checkpoint binary>.
set -euo pipefail
source tools/testing/expect.sh
export_bin="$1"
make_checkpoint="$2"
t="${TEST_TMPDIR}"
mask_rcnn=tools/export/testdata/mask_rcnn_tiny.pbtxt
dbnet=tools/export/testdata/dbnet_tiny.pbtxt

"${make_checkpoint}" --config="${mask_rcnn}" --output="${t}/mask_rcnn.pt" >/dev/null
"${make_checkpoint}" --config="${dbnet}" --output="${t}/dbnet.pt" >/dev/null
"${make_checkpoint}" --config="${dbnet}" --output="${t}/dbnet_unrecorded.pt" \
  --record_config=false >/dev/null

# The config keeps an EMA: exported by default, and said so.
"${export_bin}" --config="${mask_rcnn}" --checkpoint="${t}/mask_rcnn.pt" --layout=torchvision \
  --output="${t}/ema.pth" >"${t}/ema.log"
expect_grep -F "exported the EMA weights of ${t}/mask_rcnn.pt (step 7): the checkpoint holds EMA weights, exported by default" "${t}/ema.log"
expect_grep -E "^wrote [0-9]+ tensors in the torchvision layout of MaskRCNN to ${t}/ema.pth$" "${t}/ema.log"
expect_grep -F "num_batches_tracked buffers added as 0" "${t}/ema.log"
expect_true "the export exists" test -s "${t}/ema.pth"

"${export_bin}" --config="${mask_rcnn}" --checkpoint="${t}/mask_rcnn.pt" --layout=torchvision \
  --output="${t}/live.pth" --weights=model >"${t}/live.log"
expect_grep -F "exported the live weights of ${t}/mask_rcnn.pt (step 7) (--weights=model; it also holds EMA weights)" "${t}/live.log"
expect_true "EMA and live exports differ" bash -c "! cmp -s '${t}/ema.pth' '${t}/live.pth'"
ema_count="$(sed -n 's/^wrote \([0-9]*\) tensors.*/\1/p' "${t}/ema.log")"
live_count="$(sed -n 's/^wrote \([0-9]*\) tensors.*/\1/p' "${t}/live.log")"
expect_eq "${ema_count}" "${live_count}" "tensor count, EMA vs live"

"${export_bin}" --config="${dbnet}" --checkpoint="${t}/dbnet.pt" --layout=torchvision_resnet \
  --output="${t}/dbnet_resnet.pth" >"${t}/dbnet_resnet.log"
expect_grep -F "(the checkpoint holds no EMA weights)" "${t}/dbnet_resnet.log"
expect_grep -F "fc.weight and fc.bias" "${t}/dbnet_resnet.log"
expect_grep -E "^wrote 120 tensors in the torchvision_resnet layout of DBNet" "${t}/dbnet_resnet.log"

"${export_bin}" --config="${dbnet}" --checkpoint="${t}/dbnet.pt" --layout=mhliao_db \
  --output="${t}/dbnet_mhliao.pth" >"${t}/dbnet_mhliao.log"
expect_grep -F "model.load_state_dict(states, strict=False), and expect only those four missing" \
  "${t}/dbnet_mhliao.log"
expect_grep -E "^wrote 158 tensors in the mhliao_db layout of DBNet" "${t}/dbnet_mhliao.log"

# refuses <name> <expected message> <command...>: exit code 1, the message on stderr, no
# output file and no temporary one.
refuses() {
  local name="$1" message="$2" rc=0
  shift 2
  "$@" >"${t}/${name}.out" 2>"${t}/${name}.err" || rc=$?
  expect_eq 1 "${rc}" "${name}: exit code"
  expect_grep -F "${message}" "${t}/${name}.err"
  expect_true "${name}: no output file" test ! -e "${t}/${name}.pth"
  expect_true "${name}: no temporary file" bash -c "! ls '${t}'/*.partial-* 2>/dev/null"
}

refuses unknown_layout \
  "error: unknown --layout 'detectron2'; MaskRCNN can be exported as: native, torchvision, torchvision_resnet" \
  "${export_bin}" --config="${mask_rcnn}" --checkpoint="${t}/mask_rcnn.pt" --layout=detectron2 \
  --output="${t}/unknown_layout.pth"
refuses mhliao_for_mask_rcnn \
  "error: --layout=mhliao_db is not supported for MaskRCNN; MaskRCNN can be exported as: native, torchvision, torchvision_resnet ('mhliao_db' is MhLiao/DB's DBNet, for a DBNet model)" \
  "${export_bin}" --config="${mask_rcnn}" --checkpoint="${t}/mask_rcnn.pt" --layout=mhliao_db \
  --output="${t}/mhliao_for_mask_rcnn.pth"
refuses danet_layout_for_dbnet \
  "error: --layout=junfu1115_danet is not supported for DBNet; DBNet can be exported as: native, mhliao_db, torchvision_resnet ('junfu1115_danet' is the DANet authors' junfu1115/DANet, for a DANet model)" \
  "${export_bin}" --config="${dbnet}" --checkpoint="${t}/dbnet.pt" --layout=junfu1115_danet \
  --output="${t}/danet_layout_for_dbnet.pth"
refuses unsupported_layout \
  "error: --layout=torchvision is not supported for DBNet; DBNet can be exported as: native, mhliao_db, torchvision_resnet" \
  "${export_bin}" --config="${dbnet}" --checkpoint="${t}/dbnet.pt" --layout=torchvision \
  --output="${t}/unsupported_layout.pth"
refuses wrong_model \
  "holds a DBNet (its run's config), but the config builds a MaskRCNN: give --config the pipeline config the checkpoint was trained with" \
  "${export_bin}" --config="${mask_rcnn}" --checkpoint="${t}/dbnet.pt" --layout=torchvision \
  --output="${t}/wrong_model.pth"
refuses wrong_model_unrecorded \
  "does not hold the config's model (MaskRCNN)" \
  "${export_bin}" --config="${mask_rcnn}" --checkpoint="${t}/dbnet_unrecorded.pt" \
  --layout=torchvision --output="${t}/wrong_model_unrecorded.pth"
refuses no_ema \
  "holds no EMA weights (its run had train.ema_decay 0); use --weights=model" \
  "${export_bin}" --config="${dbnet}" --checkpoint="${t}/dbnet.pt" --layout=native \
  --weights=ema --output="${t}/no_ema.pth"
touch "${t}/a_file"
refuses not_a_directory \
  "' is not a directory; create it or name a file in an existing one" \
  "${export_bin}" --config="${mask_rcnn}" --checkpoint="${t}/mask_rcnn.pt" --layout=torchvision \
  --output="${t}/a_file/not_a_directory.pth"
# The output names a directory: the rename fails after the data was written, and the
# temporary file is removed.
mkdir -p "${t}/a_directory.pth"
refuses a_directory_output "cannot put '${t}/a_directory.pth' into place" \
  "${export_bin}" --config="${mask_rcnn}" --checkpoint="${t}/mask_rcnn.pt" --layout=torchvision \
  --output="${t}/a_directory.pth"
echo PASS
