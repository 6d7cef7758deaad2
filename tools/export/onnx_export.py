"""Second half of //tools/export:onnx: a DBNet's, DANet's or Mask R-CNN's inference graph as
an ONNX file.

Usage (the C++ driver tools/export/onnx_main.cc runs it; by hand for a directory it wrote):
    onnx_export.py --bundle=DIR --output=model.onnx [--fixed_size] [--tolerance=X] [--opset=N]
        [--min_matched=X]

DIR holds what the driver wrote from a checkpoint: spec.json (the architecture: model type,
ResNet depth, output stride, multi-grid, deformable stages, head sizes), weights.pth (the
state dict in this project's own keys, --layout=native) and reference.pth (images and OUR C++
model's outputs on them, in eval mode). The network is rebuilt here in PyTorch with the same
module names as the C++ one, so load_state_dict(strict=True) proves every tensor has its place
(spec.json adds what the weights do not say: for Mask R-CNN its anchors and inference options);
torch.onnx.export (the dynamo exporter) writes the graph; onnxruntime then runs the file on every
reference image and each output must equal ours within float32 noise, else the file is removed
and the exit code is 1. Mask R-CNN's detections are matched with ours (same image and label, IoU
> 0.99): all of them by default (--min_matched), their boxes, scores and mask probabilities within
the tolerance, their pasted masks but for a share of pixels at the threshold (MASK_PIXEL_SHARE).

Deformable convolutions (DBNet's DCN recipes) become ONNX DeformConv (opset 19), which
onnxruntime's CPU provider runs. Mask R-CNN's whole inference is in the graph: anchors, proposal
selection with ONNX NonMaxSuppression, RoIAlign as ONNX RoiAlign (output_half_pixel, i.e.
aligned=False), the box and mask heads, per-class NonMaxSuppression and the paste of the masks.
"""
import argparse
import json
import os
import tempfile

import numpy as np
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


# ---- Mask R-CNN's inference (models/mask_rcnn Detect, and Predict's paste) on a padded batch.
# Data-dependent counts (proposals, detections) come from NonMaxSuppression and NonZero; every
# image's candidates are ranked and selected together, image by image as batch entries, so the
# graph has no loop over images and the batch size is dynamic.

@torch.library.custom_op("vision_onnx::nms", mutates_args=())
def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float,
        score_threshold: float) -> torch.Tensor:
    """ONNX NonMaxSuppression (exported as it, see nms_translation): boxes [B, K, 4], scores
    [B, C, K]; per batch entry and class, the boxes scoring above score_threshold, greedily
    suppressed at IoU > iou_threshold; [S, 3] rows (batch entry, class, box)."""
    selected = [torch.zeros(0, 3, dtype=torch.long)]
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            members = torch.nonzero(scores[b, c] > score_threshold).flatten()
            keep = members[torchvision.ops.nms(boxes[b, members], scores[b, c, members],
                                               iou_threshold)]
            selected.append(torch.stack([torch.full_like(keep, b), torch.full_like(keep, c), keep],
                                        1))
    return torch.cat(selected)


@nms.register_fake
def _(boxes, scores, iou_threshold, score_threshold):
    return boxes.new_empty((torch.library.get_ctx().new_dynamic_size(), 3), dtype=torch.long)


def nms_translation():
    from onnxscript import opset19 as op

    def translate(boxes, scores, iou_threshold, score_threshold):
        # Boxes as (x1, y1, x2, y2) where ONNX says (y1, x1, y2, x2): its IoU is symmetric in
        # the axes (onnxruntime's arithmetic is then torchvision's, operand for operand).
        return op.NonMaxSuppression(boxes, scores, op.Constant(value_int=2**62),
                                    op.Constant(value_float=iou_threshold),
                                    op.Constant(value_float=score_threshold))

    return {torch.ops.vision_onnx.nms.default: translate}


def float_not_above(x):
    """The largest float32 <= x, as models/ops/nms_threshold.h's LargestNotAbove: the IoU
    threshold our NMS compares with."""
    f = np.float32(x)
    return float(np.nextafter(f, np.float32(-np.inf)) if float(f) > x else f)


# The score of a candidate outside an NMS batch entry or class (real ones, sigmoids and
# softmaxes, are >= 0); NonMaxSuppression's score_threshold EXCLUDED / 2 leaves it out.
EXCLUDED = -1.0


def shift_categories(boxes, valid, categories):
    """ops::BatchedNms's two ways, chosen per image: up to 1000 boxes, each category's shifted by
    category * (max coordinate + 1), as ours, so that the IoUs round as ours; more, unshifted
    (ours then runs one NMS per category). boxes [N, ..., 4], valid [N, ...], categories
    broadcastable against valid."""
    count = valid.flatten(1).sum(1)
    top = torch.where(valid.unsqueeze(-1), boxes, 0).flatten(1).amax(1)
    per_image = [-1] + [1] * (valid.dim() - 1)
    shifted = boxes + (categories.to(boxes.dtype) * (top.view(per_image) + 1)).unsqueeze(-1)
    return torch.where((count > 1000).view(per_image + [1]), boxes, shifted)


def decode(codes, boxes, weights, clip):
    """ops::BoxCoder::Decode: codes [..., 4K], boxes [..., 4] -> [..., K, 4]."""
    widths = boxes[..., 2:3] - boxes[..., 0:1]
    heights = boxes[..., 3:4] - boxes[..., 1:2]
    ctr_x = boxes[..., 0:1] + 0.5 * widths
    ctr_y = boxes[..., 1:2] + 0.5 * heights
    dx = codes[..., 0::4] / weights[0]
    dy = codes[..., 1::4] / weights[1]
    dw = (codes[..., 2::4] / weights[2]).clamp(max=clip)
    dh = (codes[..., 3::4] / weights[3]).clamp(max=clip)
    pred_ctr_x = dx * widths + ctr_x
    pred_ctr_y = dy * heights + ctr_y
    half_w = 0.5 * (torch.exp(dw) * widths)
    half_h = 0.5 * (torch.exp(dh) * heights)
    return torch.stack([pred_ctr_x - half_w, pred_ctr_y - half_h, pred_ctr_x + half_w,
                        pred_ctr_y + half_h], -1)


def clip_boxes(boxes, heights, widths):
    """ops::ClipBoxesToImage, the limits broadcast against boxes [..., 4] without its last axis."""
    zero = torch.zeros_like(boxes[..., 0::2])
    x = torch.minimum(torch.maximum(boxes[..., 0::2], zero), widths.unsqueeze(-1))
    y = torch.minimum(torch.maximum(boxes[..., 1::2], zero), heights.unsqueeze(-1))
    return torch.stack([x, y], -1).reshape(boxes.shape)


def at_least(boxes, size):
    """ops::RemoveSmallBoxes as a mask."""
    return ((boxes[..., 2] - boxes[..., 0]) >= size) & ((boxes[..., 3] - boxes[..., 1]) >= size)


class MultiScaleRoIAlign(nn.Module):
    """models/ops/multi_scale_roi_align.cc over P2..P5: each box pooled (RoIAlign, aligned false)
    from the level its size selects. The levels' scales follow the largest image height, an input,
    so they are computed in the graph and applied to the boxes (powers of two: exactly), with
    RoiAlign's spatial_scale 1."""

    def __init__(self, size, sampling_ratio):
        super().__init__()
        self.size, self.sampling_ratio = size, sampling_ratio

    def forward(self, features, boxes, batch_index, max_height):
        # log2 of each level's scale, rounded in float32 (InferScale); -log2 is its level.
        log2_scales = [torch.round(torch.log2(
            (torch.full((), f.shape[2], dtype=torch.float64) / max_height).float()))
            for f in features]
        k_min, k_max = -log2_scales[0], -log2_scales[-1]
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        target = torch.floor(torch.log2(torch.sqrt(area) / 224.0) + 4 + 1e-6)
        levels = torch.minimum(torch.maximum(target, k_min), k_max) - k_min
        result = boxes.new_zeros((boxes.shape[0], features[0].shape[1], self.size, self.size))
        for l, (f, log2_scale) in enumerate(zip(features, log2_scales)):
            index = torch.nonzero(levels == l).flatten()
            rois = torch.cat([batch_index[index].unsqueeze(1).to(boxes.dtype),
                              boxes[index] * torch.pow(2.0, log2_scale)], 1)
            result[index] = torchvision.ops.roi_align(f, rois, self.size, 1.0,
                                                      self.sampling_ratio, False)
        return result


def interpolation_matrix(start, end, size, in_size, out_size):
    """models/ops/paste_masks.cc's InterpolationMatrix: [D, out_size, in_size] resizing in_size
    samples to each box's `size` pixels placed at `start`, rows outside [start, end] zero."""
    pixel = torch.arange(out_size).unsqueeze(0)
    dst = pixel - start.unsqueeze(1)
    inside = ((dst >= 0) & (pixel <= end.unsqueeze(1))).float()
    scale = in_size / size.float().unsqueeze(1)
    src = ((dst.float() + 0.5) * scale - 0.5).clamp(min=0)
    lower = src.long().clamp(0, in_size - 1)
    upper = (lower + 1).clamp(max=in_size - 1)
    upper_weight = (src - lower.float()).clamp(0, 1) * inside
    lower_weight = (1 - upper_weight) * inside
    matrix = torch.zeros(start.shape[0], out_size, in_size)
    matrix = matrix.scatter_add(2, lower.unsqueeze(2), lower_weight.unsqueeze(2))
    return matrix.scatter_add(2, upper.unsqueeze(2), upper_weight.unsqueeze(2))


def paste(mask_probs, boxes, height, width, image_heights, image_widths, threshold):
    """ops::PasteMasks (padding 1, thresholded) of each detection into its image, as two matrix
    products: [D, height, width], zero outside the detection's image (image_heights/widths)."""
    m = mask_probs.shape[-1]
    padded = F.pad(mask_probs[:, 0], (1, 1, 1, 1))
    scale = (m + 2) / m
    half_w = (boxes[:, 2] - boxes[:, 0]) * 0.5 * scale
    half_h = (boxes[:, 3] - boxes[:, 1]) * 0.5 * scale
    centre_x = (boxes[:, 2] + boxes[:, 0]) * 0.5
    centre_y = (boxes[:, 3] + boxes[:, 1]) * 0.5
    x1, x2 = (centre_x - half_w).long(), (centre_x + half_w).long()
    y1, y2 = (centre_y - half_h).long(), (centre_y + half_h).long()
    rows = interpolation_matrix(y1, torch.minimum(y2, image_heights.long() - 1),
                                (y2 - y1 + 1).clamp(min=1), m + 2, height)
    columns = interpolation_matrix(x1, torch.minimum(x2, image_widths.long() - 1),
                                   (x2 - x1 + 1).clamp(min=1), m + 2, width)
    return torch.matmul(torch.matmul(rows, padded), columns.transpose(1, 2)) > threshold


class MaskRCNN(nn.Module):
    """models/mask_rcnn's Detect on a padded batch (images [N, 3, H, W], image_sizes [N, 2] each
    image's height and width inside it), and the masks Predict pastes. All images' detections
    together, image by image, best first: boxes [D, 4] (x1, y1, x2, y2 in batch pixels), scores
    [D], labels [D] (1..K; 0 is the background), batch_index [D], mask_probs [D, 1, 28, 28] (the
    detected class's map, sigmoid), masks [D, H, W] (pasted mask_probs > mask_threshold, false
    outside the detection's image)."""

    inputs = ("images", "image_sizes")

    def __init__(self, spec):
        super().__init__()
        self.backbone = nn.Module()
        self.backbone.body = make_backbone(spec)
        self.backbone.fpn = Fpn(spec["backbone"]["out_channels"], spec["fpn_channels"])
        c = spec["fpn_channels"]
        self.rpn_options, self.options = spec["rpn"], spec["roi_heads"]
        cells = [torch.tensor(a, dtype=torch.float32) for a in self.rpn_options["cell_anchors"]]
        self.rpn = nn.Module()
        self.rpn.head = RpnHead(c, cells[0].shape[0])
        for l, cell in enumerate(cells):
            self.register_buffer(f"cell_anchors{l}", cell, persistent=False)
        self.num_levels = len(cells)
        self.mask_threshold = spec["mask_threshold"]
        o = self.options
        classes, width = o["num_classes"], o["representation_size"]
        self.num_classes = classes
        self.roi_heads = nn.Module()
        self.roi_heads.box_head = nn.Module()
        self.roi_heads.box_head.fc6 = nn.Linear(c * o["box_roi_size"] ** 2, width)
        self.roi_heads.box_head.fc7 = nn.Linear(width, width)
        self.roi_heads.box_predictor = nn.Module()
        self.roi_heads.box_predictor.cls_score = nn.Linear(width, classes)
        self.roi_heads.box_predictor.bbox_pred = nn.Linear(width, 4 * classes)
        self.roi_heads.mask_head = nn.Module()
        channels = c
        for i, out in enumerate(o["mask_head_channels"]):
            self.roi_heads.mask_head.add_module(f"mask_fcn{i + 1}",
                                                nn.Conv2d(channels, out, 3, padding=1))
            channels = out
        self.roi_heads.mask_predictor = nn.Module()
        self.roi_heads.mask_predictor.conv5_mask = nn.ConvTranspose2d(channels, channels, 2, 2)
        self.roi_heads.mask_predictor.mask_fcn_logits = nn.Conv2d(channels, classes, 1)
        self.box_pooler = MultiScaleRoIAlign(o["box_roi_size"], o["sampling_ratio"])
        self.mask_pooler = MultiScaleRoIAlign(o["mask_roi_size"], o["sampling_ratio"])

    def proposals(self, pyramid, images, heights, widths):
        """RegionProposalNetworkImpl::forward in eval mode: each image's proposals, best first,
        [N, P, 4] with P = min(post_nms_top_n, candidates), and which of them are real [N, P]."""
        o, head = self.rpn_options, self.rpn.head
        n, height, width = images.shape[0], images.shape[2], images.shape[3]
        scores, boxes, levels = [], [], []
        for l, p in enumerate(pyramid):
            hidden = F.relu(head.conv(p))
            h, w = p.shape[2], p.shape[3]
            cell = getattr(self, f"cell_anchors{l}")
            objectness = head.cls_logits(hidden).permute(0, 2, 3, 1).reshape(n, -1)
            deltas = head.bbox_pred(hidden).view(n, cell.shape[0], 4, h, w).permute(0, 3, 4, 1, 2)
            deltas = deltas.reshape(n, -1, 4)
            # AnchorGenerator: integer strides, the padded batch size over the level's.
            shift_x = torch.arange(w, dtype=torch.int64) * (width // w)
            shift_y = torch.arange(h, dtype=torch.int64) * (height // h)
            sy, sx = torch.meshgrid(shift_y, shift_x, indexing="ij")
            sx, sy = sx.reshape(-1), sy.reshape(-1)
            shifts = torch.stack([sx, sy, sx, sy], 1).float()
            anchors = (shifts.unsqueeze(1) + cell.unsqueeze(0)).reshape(-1, 4)
            k = torch.sym_min(o["pre_nms_top_n"], objectness.shape[1])
            top, index = objectness.topk(k, 1)
            scores.append(top.sigmoid())
            boxes.append(decode(deltas.gather(1, index.unsqueeze(2).expand(-1, -1, 4)),
                                anchors[index], (1.0, 1.0, 1.0, 1.0), o["bbox_xform_clip"])
                         .squeeze(2))
            levels.append(torch.full((k,), l, dtype=torch.int64))
        scores, levels = torch.cat(scores, 1), torch.cat(levels)
        boxes = clip_boxes(torch.cat(boxes, 1), heights.unsqueeze(1), widths.unsqueeze(1))
        valid = at_least(boxes, o["min_size"]) & (scores >= o["score_threshold"])
        # NMS within each image (batch entry) and level (class).
        member = valid.unsqueeze(1) & (levels == torch.arange(self.num_levels).unsqueeze(1))
        selected = nms(shift_categories(boxes, valid, levels),
                       torch.where(member, scores.unsqueeze(1), EXCLUDED),
                       float_not_above(o["nms_threshold"]), EXCLUDED / 2)
        kept = torch.zeros_like(valid)
        kept[selected[:, 0], selected[:, 2]] = True
        # The survivors by score; ties in candidate order (TopK's), as ours.
        k = torch.sym_min(o["post_nms_top_n"], scores.shape[1])
        _, index = torch.where(kept, scores, EXCLUDED).topk(k, 1)
        return boxes.gather(1, index.unsqueeze(2).expand(-1, -1, 4)), kept.gather(1, index)

    def forward(self, images, image_sizes):
        o = self.options
        pyramid = self.backbone.fpn(self.backbone.body(images))
        n = images.shape[0]
        heights, widths = image_sizes[:, 0].float(), image_sizes[:, 1].float()
        max_height = image_sizes[:, 0].max().double()
        proposals, real = self.proposals(pyramid, images, heights, widths)

        # The box head on every image's proposals.
        where = torch.nonzero(real)
        rois, roi_image = proposals[where[:, 0], where[:, 1]], where[:, 0]
        x = self.box_pooler(pyramid[:4], rois, roi_image, max_height).flatten(1)
        x = F.relu(self.roi_heads.box_head.fc6(x))
        x = F.relu(self.roi_heads.box_head.fc7(x))
        class_scores = torch.softmax(self.roi_heads.box_predictor.cls_score(x), -1)
        decoded = decode(self.roi_heads.box_predictor.bbox_pred(x), rois, (10.0, 10.0, 5.0, 5.0),
                         o["bbox_xform_clip"])
        decoded = clip_boxes(decoded, heights[roi_image].unsqueeze(1),
                             widths[roi_image].unsqueeze(1))
        # Candidates [N, P, classes - 1] (background dropped), proposal-major as ours.
        p, c1 = proposals.shape[1], self.num_classes - 1
        boxes = proposals.new_zeros((n, p, c1, 4))
        boxes[where[:, 0], where[:, 1]] = decoded[:, 1:]
        scores = proposals.new_zeros((n, p, c1))
        scores[where[:, 0], where[:, 1]] = class_scores[:, 1:]
        valid = (real.unsqueeze(2) & (scores > o["score_threshold"])
                 & at_least(boxes, o["min_size"]))
        # NMS within each image and class: one batch entry per (image, class).
        shifted = shift_categories(boxes, valid, torch.arange(1, self.num_classes).view(1, 1, -1))
        selected = nms(shifted.permute(0, 2, 1, 3).reshape(n * c1, p, 4),
                       torch.where(valid, scores, EXCLUDED).permute(0, 2, 1).reshape(n * c1, 1, p),
                       float_not_above(o["nms_threshold"]), EXCLUDED / 2)
        kept = torch.zeros_like(valid)
        kept[selected[:, 0] // c1, selected[:, 2], selected[:, 0] % c1] = True
        kept, scores, boxes = kept.flatten(1), scores.flatten(1), boxes.flatten(1, 2)
        # The best detections_per_image survivors of each image; ties in candidate order.
        k = torch.sym_min(o["detections_per_image"], kept.shape[1])
        _, index = torch.where(kept, scores, EXCLUDED).topk(k, 1)
        where = torch.nonzero(kept.gather(1, index))
        batch_index, index = where[:, 0], index[where[:, 0], where[:, 1]]
        det_boxes, det_scores = boxes[batch_index, index], scores[batch_index, index]
        labels = index % c1 + 1

        # The mask branch: the detected class's map.
        m = self.mask_pooler(pyramid[:4], det_boxes, batch_index, max_height)
        for conv in self.roi_heads.mask_head.children():
            m = F.relu(conv(m))
        m = F.relu(self.roi_heads.mask_predictor.conv5_mask(m))
        logits = self.roi_heads.mask_predictor.mask_fcn_logits(m)
        mask_probs = logits.gather(1, labels.view(-1, 1, 1, 1).expand(-1, 1, *logits.shape[2:]))
        mask_probs = mask_probs.sigmoid()
        masks = paste(mask_probs, det_boxes, images.shape[2], images.shape[3],
                      heights[batch_index], widths[batch_index], self.mask_threshold)
        return det_boxes, det_scores, labels, batch_index, mask_probs, masks

def make_backbone(spec):
    b = spec["backbone"]
    if b["type"] != "ResNet":
        raise SystemExit(f"error: backbone {b['type']!r} has no Python definition here")
    return ResNet(b["depth"], b["output_stride"], b["multi_grid"], b["stage_with_dcn"],
                  b["frozen_batchnorm"])


DETECTIONS = ["boxes", "scores", "labels", "batch_index", "mask_probs", "masks"]
MODELS = {"DBNet": (DBNet, ["probability", "threshold", "binary"]),
          "DANet": (DANet, ["logits"]),
          "MaskRCNN": (MaskRCNN, DETECTIONS)}


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


def export(model, example, path, names, dynamic, opset, translations):
    inputs = getattr(model, "inputs", ("images",))
    shapes = {name: {} for name in inputs}
    if "image_sizes" in inputs:
        # One row per image: the batch is dynamic (at a fixed size too).
        batch = torch.export.Dim("batch")
        shapes = {name: {0: batch} for name in inputs}
    if dynamic:
        shapes["images"].update({2: torch.export.Dim("height"), 3: torch.export.Dim("width")})
    program = torch.onnx.export(
        model, example, input_names=list(inputs), output_names=names,
        dynamic_shapes=shapes if any(shapes.values()) else None, opset_version=opset,
        dynamo=True, external_data=False, custom_translation_table=translations or None)
    program.save(path)


# ---- Mask R-CNN's check: detections matched, not compared by position (counts may differ). ----

def match_detections(ours, got):
    """Matches each of our detections, best first, with the unmatched one of `got` in the same
    image with the same label that overlaps it most, if their IoU is > 0.99: (ours, got)
    indices of the matches."""
    if len(ours["scores"]) == 0 or len(got["scores"]) == 0:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    same = ((ours["labels"].unsqueeze(1) == got["labels"].unsqueeze(0))
            & (ours["batch_index"].unsqueeze(1) == got["batch_index"].unsqueeze(0)))
    iou = torch.where(same, torchvision.ops.box_iou(ours["boxes"].double(),
                                                    got["boxes"].double()), 0)
    taken = torch.zeros(len(got["scores"]), dtype=torch.bool)
    pairs = []
    for i in range(len(ours["scores"])):
        row = torch.where(taken, 0, iou[i])
        j = int(row.argmax())
        if row[j] > 0.99:
            pairs.append((i, j))
            taken[j] = True
    index = torch.tensor(pairs, dtype=torch.long).view(-1, 2)
    return index[:, 0], index[:, 1]


def detection_differences(ours, got):
    i, j = match_detections(ours, got)

    def diff(name):
        if len(i) == 0:
            return 0.0
        return (ours[name][i].double() - got[name][j].double()).abs().max().item()

    masks, other = ours["masks"][i], got["masks"][j]
    return {"ours": len(ours["scores"]), "got": len(got["scores"]), "matched": len(i),
            "boxes": diff("boxes"), "scores": diff("scores"), "mask_probs": diff("mask_probs"),
            "pixels": (masks != other).sum().item(), "mask_pixels": (masks | other).sum().item()}


# Pasted masks are thresholded: a pixel whose probability is within float32 noise of it may
# flip. Accepted: this share of the pixels in either mask of the matched detections.
MASK_PIXEL_SHARE = 1e-3


def check_detections(case, reference, got, eager, args):
    """Prints how onnxruntime's detections compare with ours; returns the problems found."""
    ours = {name: reference[f"{case}/{name}"] for name in DETECTIONS}
    d = detection_differences(ours, dict(zip(DETECTIONS, got)))
    e = detection_differences(ours, dict(zip(DETECTIONS, eager)))
    images = reference[f"{case}/images"]
    box_scale = max(1.0, ours["boxes"].abs().max().item()) if d["ours"] else 1.0
    print(f"MaskRCNN {images.shape[2]}x{images.shape[3]}, {images.shape[0]} image(s): ours "
          f"{d['ours']} detections, onnxruntime {d['got']}, {d['matched']} matched (same image and "
          f"label, IoU > 0.99); matched: boxes max abs diff {d['boxes']:.3g} (|ours| <= "
          f"{box_scale:.3g}), scores {d['scores']:.3g}, mask_probs {d['mask_probs']:.3g}, pasted "
          f"mask pixels differing {d['pixels']} of {d['mask_pixels']} (PyTorch eager vs ours: "
          f"{e['matched']} of {e['ours']} matched, boxes {e['boxes']:.3g}, scores "
          f"{e['scores']:.3g}, mask_probs {e['mask_probs']:.3g})")
    problems = []
    if d["matched"] < args.min_matched * max(d["ours"], d["got"]):
        problems.append(f"{d['matched']} of {d['ours']} detections (onnxruntime: {d['got']}) "
                        f"matched < --min_matched={args.min_matched}")
    for name, scale in [("boxes", box_scale), ("scores", 1.0), ("mask_probs", 1.0)]:
        if d[name] > args.tolerance * scale:
            problems.append(f"{name} differ by {d[name]:.3g} > --tolerance={args.tolerance} x "
                            f"{scale:.3g}")
    if d["pixels"] > MASK_PIXEL_SHARE * d["mask_pixels"]:
        problems.append(f"{d['pixels']} of {d['mask_pixels']} pasted mask pixels differ (more "
                        f"than {MASK_PIXEL_SHARE:g})")
    return [f"{images.shape[2]}x{images.shape[3]}: {p}" for p in problems]


def check_maps(spec, case, reference, names, got, eager):
    """Prints how onnxruntime's maps compare with ours; returns the worst difference relative to
    max(1, max |ours|)."""
    images = reference[f"{case}/images"]
    worst = 0.0
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
        # PyTorch's eager model against ours: the float32 noise of two implementations of the
        # same network, for judging the ONNX difference.
        floor = (eager_value - ours).abs().max().item()
        print(f"{spec['model']} {name} {images.shape[2]}x{images.shape[3]}: "
              f"max abs diff {diff.max().item():.3g}, max rel diff {rel:.3g} "
              f"(|ours| <= {ours.abs().max().item():.3g}; PyTorch eager vs ours: "
              f"{floor:.3g})")
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--fixed_size", action="store_true",
                        help="the first reference image's height and width only")
    parser.add_argument("--opset", type=int, default=19)
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest |onnxruntime - ours| / max(1, max |ours|) accepted "
                             "(the binary map's: times k / 4; Mask R-CNN: of matched detections)")
    parser.add_argument("--min_matched", type=float, default=1.0,
                        help="Mask R-CNN: the share of detections (ours and onnxruntime's) that "
                             "must be matched (same image and label, IoU > 0.99)")
    args = parser.parse_args()

    import onnxruntime

    with open(os.path.join(args.bundle, "spec.json")) as f:
        spec = json.load(f)
    if spec["model"] not in MODELS:
        raise SystemExit(f"error: no ONNX export for model {spec['model']!r}; "
                         f"supported: {', '.join(sorted(MODELS))}")
    make, names = MODELS[spec["model"]]
    model = make(spec).eval()
    model.load_state_dict(torch.load(os.path.join(args.bundle, "weights.pth"), weights_only=True),
                          strict=True)
    inputs = getattr(model, "inputs", ("images",))
    reference = torch.load(os.path.join(args.bundle, "reference.pth"), weights_only=True)
    cases = sorted({k.split("/")[0] for k in reference})
    if args.fixed_size:
        cases = cases[:1]
    translations = {}
    if any(spec["backbone"]["stage_with_dcn"]):
        translations.update(deform_conv_translation())
    if spec["model"] == "MaskRCNN":
        translations.update(nms_translation())
        height, width = reference[f"{cases[0]}/images"].shape[2:]
        if not args.fixed_size and min(height, width) <= 64:
            # Traced with a 1-pixel pyramid level (P6 is 1/64), the graph would be specialised to
            # it; traced larger, it runs on small images too.
            raise SystemExit(f"error: Mask R-CNN with dynamic sizes is traced on an image larger "
                             f"than 64x64 (every pyramid level at least 2x2), got {height}x"
                             f"{width}; give a larger --size (the graph then runs on smaller "
                             f"images too) or --fixed_size")

    out_dir = os.path.dirname(os.path.abspath(args.output))
    fd, temporary = tempfile.mkstemp(suffix=".onnx", dir=out_dir)
    os.close(fd)
    try:
        with torch.no_grad():
            export(model, tuple(reference[f"{cases[0]}/{name}"] for name in inputs), temporary,
                   names, not args.fixed_size, args.opset, translations)
        session = onnxruntime.InferenceSession(temporary, providers=["CPUExecutionProvider"])
        worst, problems = 0.0, []
        for case in cases:
            feed = [reference[f"{case}/{name}"] for name in inputs]
            got = session.run(names, {name: t.numpy() for name, t in zip(inputs, feed)})
            with torch.no_grad():
                eager = model(*feed)
            eager = eager if isinstance(eager, tuple) else (eager,)
            if spec["model"] == "MaskRCNN":
                problems += check_detections(case, reference,
                                             [torch.from_numpy(g) for g in got], eager, args)
            else:
                worst = max(worst, check_maps(spec, case, reference, names, got, eager))
        if problems:
            raise SystemExit("error: onnxruntime's detections differ from ours: "
                             + "; ".join(problems) + "; nothing written")
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
    signature = "input 'images' [N, 3, H, W]"
    if "image_sizes" in inputs:
        signature = "inputs 'images' [N, 3, H, W], 'image_sizes' [N, 2] (int64), dynamic N"
    print(f"wrote {args.output} (opset {args.opset}, {signature}, {sizes}; "
          f"outputs {', '.join(names)}); onnxruntime equals ours on {len(cases)} size(s)")


if __name__ == "__main__":
    main()
