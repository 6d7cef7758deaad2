#!/usr/bin/env bash
# DANet end to end through the launcher: two processes, SyncBatchNorm, bf16 autocast,
# activation checkpointing of backbone stages and both attention modules, distributed mIoU
# evaluation and checkpoints, for a few steps on the testdata Cityscapes sample; then the eval
# and infer tools on the checkpoint.
set -euo pipefail
source tools/testing/expect.sh
config=models/danet/testdata/danet_smoke.pbtxt
out="${TEST_TMPDIR}/danet"
log="${TEST_TMPDIR}/log.txt"
tools/launch --nproc_per_node=2 --master_port=0 -- tools/train --config="${config}" \
  --override="checkpoint { output_dir: \"${out}\" }" 2>&1 | tee "${log}"
# ResNet-18's 20 normalisation layers, the head's 4 and the auxiliary head's 1.
expect_grep "SyncBatchNorm: 25 normalisation layers synchronised over 2 ranks" "${log}"
expect_grep "activation checkpointing: backbone.layer3, backbone.layer4, head.sa, head.sc" "${log}"
expect_grep "\[rank 0\]: step 3/3" "${log}"
# Every loss term of every step is a finite number above zero.
for term in loss_fused loss_position loss_channel loss_aux; do
  [[ $(grep -cE "${term} [0-9]+\.[0-9]*[1-9]" "${log}") -eq 3 ]] || { echo "bad ${term}"; exit 1; }
done
expect_grep -E "\[rank 0\]: eval at step 3: .*mIoU [0-9.]+" "${log}"
test -f "${out}/checkpoint_3.pt"
test -f "${out}/checkpoint_2.pt"
expect_grep '"eval/mIoU"' "${out}/metrics.jsonl"

# The eval tool on the checkpoint: metrics, and result files in the Cityscapes layout.
tools/eval --config="${config}" --checkpoint="${out}/checkpoint_3.pt" \
  --output_dir="${TEST_TMPDIR}/eval" | tee "${TEST_TMPDIR}/eval.log"
expect_grep -E "mIoU +[0-9.]+" "${TEST_TMPDIR}/eval.log"
expect_grep -E "IoU/road +[0-9.]+" "${TEST_TMPDIR}/eval.log"
for image in aachen/aachen_000000_000019 bochum/bochum_000000_000100 bochum/bochum_000000_000313; do
  test -s "${TEST_TMPDIR}/eval/labelIds/${image}_leftImg8bit.png"
done

# The infer tool on a folder of images: label maps (train ids: a folder of images has no
# dataset ids), their colours and a drawing per image.
tools/infer --config="${config}" --checkpoint="${out}/checkpoint_3.pt" \
  --images=testdata/cityscapes/leftImg8bit/val/frankfurt --output_dir="${TEST_TMPDIR}/infer" \
  | tee "${TEST_TMPDIR}/infer.log"
expect_grep "label maps: class" "${TEST_TMPDIR}/infer.log"
test -s "${TEST_TMPDIR}/infer/trainIds/frankfurt/frankfurt_000000_000294_leftImg8bit.png"
test -s "${TEST_TMPDIR}/infer/color/frankfurt/frankfurt_000000_000294_leftImg8bit.png"
test -s "${TEST_TMPDIR}/infer/frankfurt_000000_000294_leftImg8bit.png"
echo "PASS"
