"""Loads tools/export's torchvision-layout file into torchvision's Mask R-CNN and checks it.

Usage: check_torchvision.py <export.pth> <native.pth> <num_classes incl. background>

export.pth (--layout=torchvision) must load with strict=True into
maskrcnn_resnet50_fpn(weights=None, weights_backbone=None) (BatchNorm2d) and into the
architecture of torchvision's published weights (FrozenBatchNorm2d); every tensor torchvision
then holds must equal the same checkpoint's tensor in native.pth (--layout=native, this
project's key names), found through a renaming written here independently of the C++ one.
"""
import collections
import re
import sys

import torch
import torchvision
from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
from torchvision.ops.misc import FrozenBatchNorm2d


def ours(key):
    """torchvision's key -> this project's."""
    for pattern, repl in (
        (r"^backbone\.fpn\.inner_blocks\.(\d+)\.0\.", r"backbone.fpn.lateral\1."),
        (r"^backbone\.fpn\.layer_blocks\.(\d+)\.0\.", r"backbone.fpn.smooth\1."),
        (r"^rpn\.head\.conv\.0\.0\.", "rpn.head.conv."),
    ):
        if re.match(pattern, key):
            return re.sub(pattern, repl, key)
    m = re.match(r"^roi_heads\.mask_head\.(\d+)\.0\.(.*)$", key)
    if m:
        return f"roi_heads.mask_head.mask_fcn{int(m.group(1)) + 1}.{m.group(2)}"
    return key


def main(export_path, native_path, num_classes):
    exported = torch.load(export_path, weights_only=True)
    native = torch.load(native_path, weights_only=True)
    assert isinstance(exported, collections.OrderedDict), type(exported)

    model = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=num_classes)
    model.load_state_dict(exported, strict=True)
    matched, counters = set(), 0
    for key, value in model.state_dict().items():
        mine = ours(key)
        if mine not in native:
            assert key.endswith("num_batches_tracked"), f"{key} ({mine}) is not in {native_path}"
            assert value.item() == 0, f"{key} = {value}"
            counters += 1
            continue
        assert value.dtype == native[mine].dtype, f"{key}: {value.dtype} vs {native[mine].dtype}"
        assert torch.equal(value, native[mine]), f"{key} differs from {mine}"
        matched.add(mine)
    missed = set(native) - matched
    assert not missed, f"tensors of ours torchvision has no place for: {sorted(missed)}"

    # The architecture torchvision's published maskrcnn_resnet50_fpn weights are for.
    frozen = torchvision.models.detection.MaskRCNN(
        _resnet_fpn_extractor(torchvision.models.resnet50(norm_layer=FrozenBatchNorm2d), 3),
        num_classes=num_classes)
    frozen.load_state_dict(exported, strict=True)
    for key, value in frozen.state_dict().items():
        assert torch.equal(value, native[ours(key)]), f"FrozenBatchNorm2d model: {key} differs"
    print(f"PASS: {len(matched)} tensors equal ours after strict loading; "
          f"{counters} num_batches_tracked counters are 0")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
