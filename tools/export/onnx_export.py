"""Second half of //tools/export:onnx: a DBNet's or DANet's inference graph (Mask R-CNN's
backbone, FPN and RPN head) as an ONNX file.

Usage (the C++ driver tools/export/onnx_main.cc runs it; by hand for a directory it wrote):
    onnx_export.py --bundle=DIR --output=model.onnx [--fixed_size] [--tolerance=X] [--opset=N]

DIR holds what the driver wrote from a checkpoint: spec.json (the architecture: model type,
ResNet depth, output stride, multi-grid, deformable stages, head sizes), weights.pth (the
state dict in this project's own keys, --layout=native) and reference.pth (images and OUR C++
model's outputs on them, in eval mode). The network is rebuilt here in PyTorch with the same
module names as the C++ one, so load_state_dict(strict=True) proves every tensor has its place
(for Mask R-CNN, every tensor under backbone. and rpn.head.);
torch.onnx.export (the dynamo exporter) writes the graph; onnxruntime then runs the file on every
reference image and each output must equal ours within float32 noise, else the file is removed
and the exit code is 1.

Deformable convolutions (DBNet's DCN recipes) become ONNX DeformConv (opset 19), which
onnxruntime's CPU provider runs.
"""
import argparse
import json
import os
import tempfile

import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torchvision.ops.misc import FrozenBatchNorm2d


# ---- The networks, named as the C++ modules (state dict keys equal --layout=native's). ----

class DeformConv2d(nn.Module):
    """models/ops/deform_conv.h: mmcv's ModulatedDeformConv2dPack (one group)."""

    def __init__(self, cin, cout, stride, padding, dilation):
        super().__init__()
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.weight = nn.Parameter(torch.zeros(cout, cin, 3, 3))
        self.conv_offset = nn.Conv2d(cin, 27, 3, stride, padding, dilation, bias=True)

    def forward(self, x):
        predicted = self.conv_offset(x)
        offset, mask = predicted[:, :18], predicted[:, 18:].sigmoid()
        return torchvision.ops.deform_conv2d(x, offset, self.weight, None, self.stride,
                                             self.padding, self.dilation, mask)


def norm(channels, frozen):
    return FrozenBatchNorm2d(channels) if frozen else nn.BatchNorm2d(channels)


def conv3x3(cin, cout, stride, dilation, deformable):
    if deformable:
        return DeformConv2d(cin, cout, stride, dilation, dilation)
    return nn.Conv2d(cin, cout, 3, stride, dilation, dilation, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride, dilation, downsample, frozen, deformable):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, dilation, dilation, bias=False)
        self.bn1 = norm(planes, frozen)
        self.conv2 = conv3x3(planes, planes, 1, 1, deformable)
        self.bn2 = norm(planes, frozen)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride, dilation, downsample, frozen, deformable):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = norm(planes, frozen)
        self.conv2 = conv3x3(planes, planes, stride, dilation, deformable)
        self.bn2 = norm(planes, frozen)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = norm(planes * 4, frozen)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """models/backbones/resnet.cc: torchvision's layout, dilation in BasicBlock too, multi-grid
    and deformable stages; returns layer1..layer4."""

    def __init__(self, depth, output_stride, multi_grid, stage_with_dcn, frozen):
        super().__init__()
        blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3]}[depth]
        block = BasicBlock if depth < 50 else Bottleneck
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = norm(64, frozen)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        dilate = [False, False, output_stride == 8, output_stride <= 16]
        self.in_planes, self.dilation = 64, 1
        for i in range(4):
            self.add_module(f"layer{i + 1}", self._stage(
                block, 64 << i, blocks[i], 1 if i == 0 else 2, dilate[i],
                bool(stage_with_dcn) and stage_with_dcn[i], frozen,
                multi_grid if i == 3 else []))

    def _stage(self, block, planes, blocks, stride, dilate, deformable, frozen, multi_grid):
        previous = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self.in_planes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.in_planes, planes * block.expansion, 1, stride, bias=False),
                norm(planes * block.expansion, frozen))
        if multi_grid:
            dilations = [self.dilation * g for g in multi_grid]
        else:
            dilations = [previous] + [self.dilation] * (blocks - 1)
        layers = []
        for b in range(blocks):
            layers.append(block(self.in_planes, planes, stride if b == 0 else 1, dilations[b],
                                downsample if b == 0 else None, frozen, deformable))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        levels = []
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
            levels.append(x)
        return levels


def upsample_nearest_to(x, like):
    return F.interpolate(x, size=like.shape[-2:], mode="nearest")


class DBNeck(nn.Module):
    """models/necks/fpn.cc as DBNet builds it (no bias, out = inner / 4)."""

    def __init__(self, in_channels, inner):
        super().__init__()
        for i, c in enumerate(in_channels):
            self.add_module(f"lateral{i}", nn.Conv2d(c, inner, 1, bias=False))
            self.add_module(f"smooth{i}", nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False))
        self.n = len(in_channels)

    def forward(self, features):
        merged = [None] * self.n
        merged[-1] = getattr(self, f"lateral{self.n - 1}")(features[-1])
        for i in range(self.n - 2, -1, -1):
            lateral = getattr(self, f"lateral{i}")(features[i])
            merged[i] = upsample_nearest_to(merged[i + 1], lateral) + lateral
        return [getattr(self, f"smooth{i}")(m) for i, m in enumerate(merged)]


def db_branch(c):
    h = c // 4
    return nn.Sequential(nn.Conv2d(c, h, 3, padding=1, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                         nn.ConvTranspose2d(h, h, 2, 2), nn.BatchNorm2d(h), nn.ReLU(),
                         nn.ConvTranspose2d(h, 1, 2, 2), nn.Sigmoid())


class DBHead(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.probability = db_branch(inner)
        self.threshold = db_branch(inner)


class DBNet(nn.Module):
    """models/dbnet: probability, threshold and binary maps [N, 1, H, W]."""

    def __init__(self, spec):
        super().__init__()
        self.backbone = make_backbone(spec)
        self.neck = DBNeck(spec["backbone"]["out_channels"], spec["inner_channels"])
        self.head = DBHead(spec["inner_channels"])
        self.k = spec["k"]

    def forward(self, images):
        levels = self.neck(self.backbone(images))
        fused = torch.cat([upsample_nearest_to(l, levels[0]) for l in levels[:0:-1]]
                          + [levels[0]], 1)
        probability = self.head.probability(fused)
        threshold = self.head.threshold(fused)
        return probability, threshold, torch.sigmoid(self.k * (probability - threshold))


class PositionAttention(nn.Module):
    """models/danet/attention.cc (as models/danet/testdata/make_danet_golden.py's PAM)."""

    def __init__(self, c, reduction):
        super().__init__()
        self.query_conv = nn.Conv2d(c, c // reduction, 1)
        self.key_conv = nn.Conv2d(c, c // reduction, 1)
        self.value_conv = nn.Conv2d(c, c, 1)
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        n, c, h, w = x.shape
        query = self.query_conv(x).reshape(n, -1, h * w).transpose(1, 2)
        key = self.key_conv(x).reshape(n, -1, h * w)
        attention = torch.softmax(torch.bmm(query, key), -1)
        value = self.value_conv(x).reshape(n, -1, h * w)
        return self.gamma * torch.bmm(value, attention.transpose(1, 2)).reshape(n, c, h, w) + x


class ChannelAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        n, c, h, w = x.shape
        flat = x.reshape(n, c, h * w)
        energy = torch.bmm(flat, flat.transpose(1, 2))
        attention = torch.softmax(energy.max(-1, keepdim=True)[0] - energy, -1)
        return self.gamma * torch.bmm(attention, flat).reshape(n, c, h, w) + x


def conv_bn_relu(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU())


def classifier(c, classes):
    return nn.Sequential(nn.Dropout2d(0.0), nn.Conv2d(c, classes, 1))


class DANetHead(nn.Module):
    def __init__(self, cin, c, classes, reduction):
        super().__init__()
        self.conv5a = conv_bn_relu(cin, c)
        self.conv5c = conv_bn_relu(cin, c)
        self.sa = PositionAttention(c, reduction)
        self.sc = ChannelAttention()
        self.conv51 = conv_bn_relu(c, c)
        self.conv52 = conv_bn_relu(c, c)
        self.conv6 = classifier(c, classes)
        self.conv7 = classifier(c, classes)
        self.conv8 = classifier(c, classes)

    def forward(self, x):
        position = self.conv51(self.sa(self.conv5a(x)))
        channel = self.conv52(self.sc(self.conv5c(x)))
        return self.conv8(position + channel)


class DANet(nn.Module):
    """models/danet: the fused logits [N, classes, H, W] (bilinear, align_corners=True)."""

    def __init__(self, spec):
        super().__init__()
        self.backbone = make_backbone(spec)
        self.head = DANetHead(spec["backbone"]["out_channels"][-1], spec["head_channels"],
                              spec["num_classes"], spec["attention_reduction"])
        if spec["aux"]:
            # Training only; kept so that the checkpoint's tensors all load strictly.
            cin = spec["backbone"]["out_channels"][2]
            self.auxlayer = nn.Module()
            self.auxlayer.conv5 = nn.Sequential(
                nn.Conv2d(cin, cin // 4, 3, padding=1, bias=False), nn.BatchNorm2d(cin // 4),
                nn.ReLU(), nn.Dropout(0.0), nn.Conv2d(cin // 4, spec["num_classes"], 1))

    def forward(self, images):
        logits = self.head(self.backbone(images)[-1])
        return F.interpolate(logits, size=images.shape[-2:], mode="bilinear", align_corners=True)


class Fpn(nn.Module):
    """models/necks/fpn.cc as Mask R-CNN builds it (bias, P6 by max pooling)."""

    def __init__(self, in_channels, out):
        super().__init__()
        for i, c in enumerate(in_channels):
            self.add_module(f"lateral{i}", nn.Conv2d(c, out, 1))
            self.add_module(f"smooth{i}", nn.Conv2d(out, out, 3, padding=1))
        self.n = len(in_channels)

    def forward(self, features):
        merged = [None] * self.n
        merged[-1] = getattr(self, f"lateral{self.n - 1}")(features[-1])
        for i in range(self.n - 2, -1, -1):
            lateral = getattr(self, f"lateral{i}")(features[i])
            merged[i] = upsample_nearest_to(merged[i + 1], lateral) + lateral
        pyramid = [getattr(self, f"smooth{i}")(m) for i, m in enumerate(merged)]
        return pyramid + [F.max_pool2d(pyramid[-1], 1, 2)]


class RpnHead(nn.Module):
    def __init__(self, c, anchors):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.cls_logits = nn.Conv2d(c, anchors, 1)
        self.bbox_pred = nn.Conv2d(c, 4 * anchors, 1)


class MaskRCNNTrunk(nn.Module):
    """models/mask_rcnn up to the RPN head's raw maps: P2..P6, then per level objectness
    [N, A, H, W] and box deltas [N, 4A, H, W]. Anchors, proposal decoding, NMS, RoIAlign and
    the box and mask heads are not in the graph (see the README)."""

    # Only these tensors of a Mask R-CNN checkpoint are in the graph.
    prefixes = ("backbone.", "rpn.head.")

    def __init__(self, spec):
        super().__init__()
        self.backbone = nn.Module()
        self.backbone.body = make_backbone(spec)
        self.backbone.fpn = Fpn(spec["backbone"]["out_channels"], spec["fpn_channels"])
        self.rpn = nn.Module()
        self.rpn.head = RpnHead(spec["fpn_channels"], spec["num_anchors"])

    def forward(self, images):
        pyramid = self.backbone.fpn(self.backbone.body(images))
        head = self.rpn.head
        hidden = [F.relu(head.conv(p)) for p in pyramid]
        return tuple(pyramid + [head.cls_logits(h) for h in hidden]
                     + [head.bbox_pred(h) for h in hidden])


LEVELS = [f"p{l}" for l in range(2, 7)]


def make_backbone(spec):
    b = spec["backbone"]
    if b["type"] != "ResNet":
        raise SystemExit(f"error: backbone {b['type']!r} has no Python definition here")
    return ResNet(b["depth"], b["output_stride"], b["multi_grid"], b["stage_with_dcn"],
                  b["frozen_batchnorm"])


MODELS = {"DBNet": (DBNet, ["probability", "threshold", "binary"]),
          "DANet": (DANet, ["logits"]),
          "MaskRCNN": (MaskRCNNTrunk, LEVELS + [f"objectness_{l}" for l in LEVELS]
                       + [f"box_deltas_{l}" for l in LEVELS])}


# ---- ONNX DeformConv for torchvision.ops.deform_conv2d (the exporter has no translation). ----

def deform_conv_translation():
    # A plain function: the exporter traces it with the int attributes torchvision's operator
    # receives (onnxscript's @script cannot build attribute lists from them).
    from onnxscript import opset19 as op

    def deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w,
                      dilation_h, dilation_w, groups, offset_groups, use_mask):
        return op.DeformConv(input, weight, offset, bias, mask if use_mask else None,
                             dilations=[dilation_h, dilation_w], group=groups,
                             offset_group=offset_groups, pads=[pad_h, pad_w, pad_h, pad_w],
                             strides=[stride_h, stride_w])

    return {torch.ops.torchvision.deform_conv2d.default: deform_conv2d}


def export(model, example, path, names, dynamic, opset, deformable):
    dynamic_shapes = None
    if dynamic:
        height, width = torch.export.Dim("height"), torch.export.Dim("width")
        dynamic_shapes = {"images": {2: height, 3: width}}
    program = torch.onnx.export(
        model, (example,), input_names=["images"], output_names=names,
        dynamic_shapes=dynamic_shapes, opset_version=opset, dynamo=True, external_data=False,
        custom_translation_table=deform_conv_translation() if deformable else None)
    program.save(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--fixed_size", action="store_true",
                        help="the first reference image's height and width only")
    parser.add_argument("--opset", type=int, default=19)
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest |onnxruntime - ours| / max(1, max |ours|) accepted "
                             "(the binary map's: times k / 4)")
    args = parser.parse_args()

    import onnxruntime

    with open(os.path.join(args.bundle, "spec.json")) as f:
        spec = json.load(f)
    if spec["model"] not in MODELS:
        raise SystemExit(f"error: no ONNX export for model {spec['model']!r}; "
                         f"supported: {', '.join(sorted(MODELS))}")
    make, names = MODELS[spec["model"]]
    weights = torch.load(os.path.join(args.bundle, "weights.pth"), weights_only=True)
    prefixes = getattr(make, "prefixes", None)
    if prefixes:
        weights = {k: v for k, v in weights.items() if k.startswith(prefixes)}
        spec["num_anchors"] = weights["rpn.head.cls_logits.weight"].shape[0]
    model = make(spec).eval()
    model.load_state_dict(weights, strict=True)
    reference = torch.load(os.path.join(args.bundle, "reference.pth"), weights_only=True)
    cases = sorted({k.split("/")[0] for k in reference})
    if args.fixed_size:
        cases = cases[:1]
    deformable = any(spec["backbone"]["stage_with_dcn"])

    out_dir = os.path.dirname(os.path.abspath(args.output))
    fd, temporary = tempfile.mkstemp(suffix=".onnx", dir=out_dir)
    os.close(fd)
    try:
        with torch.no_grad():
            export(model, reference[f"{cases[0]}/images"], temporary, names,
                   not args.fixed_size, args.opset, deformable)
        session = onnxruntime.InferenceSession(temporary, providers=["CPUExecutionProvider"])
        worst = 0.0
        for case in cases:
            images = reference[f"{case}/images"]
            got = session.run(names, {"images": images.numpy()})
            with torch.no_grad():
                eager = model(images)
            eager = eager if isinstance(eager, tuple) else (eager,)
            for name, value, eager_value in zip(names, got, eager):
                ours = reference[f"{case}/{name}"]
                value = torch.from_numpy(value)
                if value.shape != ours.shape:
                    raise SystemExit(f"error: {name} at {list(images.shape)}: onnxruntime gives "
                                     f"{list(value.shape)}, ours {list(ours.shape)}")
                diff = (value - ours).abs()
                scale = max(1.0, ours.abs().max().item())
                if name == "binary":
                    # sigmoid(k (P - T)) multiplies the maps' differences by up to k / 4.
                    scale *= max(1.0, spec["k"] / 4)
                rel = (diff / ours.abs().clamp_min(1e-3)).max().item()
                worst = max(worst, diff.max().item() / scale)
                # PyTorch's eager model against ours: the float32 noise of two implementations
                # of the same network, for judging the ONNX difference.
                floor = (eager_value - ours).abs().max().item()
                print(f"{spec['model']} {name} {images.shape[2]}x{images.shape[3]}: "
                      f"max abs diff {diff.max().item():.3g}, max rel diff {rel:.3g} "
                      f"(|ours| <= {ours.abs().max().item():.3g}; PyTorch eager vs ours: "
                      f"{floor:.3g})")
        if worst > args.tolerance:
            raise SystemExit(f"error: onnxruntime's outputs differ from ours by {worst:.3g} "
                             f"(relative to max(1, max |ours|)) > --tolerance={args.tolerance}; "
                             f"nothing written")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's file is private
        os.replace(temporary, args.output)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    sizes = "fixed " + "x".join(map(str, reference[f"{cases[0]}/images"].shape[2:])) \
        if args.fixed_size else "dynamic height and width"
    print(f"wrote {args.output} (opset {args.opset}, input 'images' [N, 3, H, W], {sizes}; "
          f"outputs {', '.join(names)}); onnxruntime equals ours on {len(cases)} size(s)")


if __name__ == "__main__":
    main()
