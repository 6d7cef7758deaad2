"""The module structures of the two reference implementations //tools/export writes layouts
for, written here from their code (attribute names, Sequential indices, forward passes), so
that an export is judged by loading it into their networks and running them:

- MhLiao/DB (backbones/resnet.py, decoders/seg_detector.py, structure/model.py,
  assets/ops/dcn/modules/deform_conv.py): SegDetectorModel -> model (nn.DataParallel of
  BasicModel) -> backbone (ResNet, deformable or not) and decoder (SegDetector).
- junfu1115/DANet at c7a2f60 (encoding/models/danet.py, encoding/models/base.py,
  encoding/dilated/resnet.py, encoding/nn/attention.py): DANet -> pretrained (the dilated
  ResNet) and head (DANetHead, whose PAM_Module / CAM_Module / DANetHead are the ones in
  models/danet/testdata/make_danet_golden.py: PAM, CAM, Head, same submodule names).

Their CUDA extensions (DB's modulated deformable convolution) are replaced by
torchvision.ops.deform_conv2d, which has the same offset layout ((dy, dx) pairs per kernel tap,
tap-major) and mask layout, and the same bilinear sampling with zeros outside the image. Where
their code computes something a state dict cannot change, the structure computes it too, and
has a switch for the fix (see ModulatedDeformConv.forward and DilatedBasicBlock).
"""
import math
import os
import sys
from collections import OrderedDict

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "models", "danet", "testdata"))
from make_danet_golden import Head as DANetHead  # noqa: E402


# ---- MhLiao/DB ----

class ModulatedDeformConv(nn.Module):
    """DB's assets/ops/dcn ModulatedDeformConv: `weight` only (DB's ResNet passes bias=False);
    forward(x, offset, mask) with the offset and mask computed outside (conv2_offset)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, deformable_groups=1, bias=True):
        super().__init__()
        assert groups == 1 and deformable_groups == 1
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size,
                                               kernel_size))
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_channels))
        else:
            self.register_parameter("bias", None)
        nn.init.uniform_(self.weight, -1 / math.sqrt(in_channels * kernel_size ** 2),
                         1 / math.sqrt(in_channels * kernel_size ** 2))

    def forward(self, x, offset, mask):
        kh, kw = self.weight.shape[2:]
        out_h = (x.shape[2] + 2 * self.padding - self.dilation * (kh - 1) - 1) // self.stride + 1
        out_w = (x.shape[3] + 2 * self.padding - self.dilation * (kw - 1) - 1) // self.stride + 1
        return torchvision.ops.deform_conv2d(
            x, cuda_kernel_view(offset, out_h, out_w), self.weight, self.bias, self.stride,
            self.padding, self.dilation, cuda_kernel_view(mask, out_h, out_w))


def cuda_kernel_view(t, out_h, out_w):
    """What DB's modulated_deformable_im2col kernel reads for an offset or mask tensor `t`
    ([N, C, h, w]): it takes t[b]'s data pointer and indexes C x out_h x out_w values from it,
    checking no shape. Equal to `t` when h, w are the output's; otherwise (DB's Bottleneck
    predicts offsets at stride 1 for a stride-2 convolution: MhLiao/DB issue #250) the first
    C * out_h * out_w values of each image's [C, h, w] block, read as [C, out_h, out_w]."""
    if tuple(t.shape[2:]) == (out_h, out_w):
        return t
    n, c = t.shape[:2]
    return torch.stack([t[b].reshape(-1)[:c * out_h * out_w] for b in range(n)]).reshape(
        n, c, out_h, out_w)


def _db_dcn_convs(module, planes, stride, offset_stride):
    """conv2_offset (27 = 18 offsets + 9 mask logits, with bias) and conv2 (DCN, no bias)."""
    module.conv2_offset = nn.Conv2d(planes, 27, kernel_size=3, padding=1, stride=offset_stride)
    module.conv2 = ModulatedDeformConv(planes, planes, kernel_size=3, padding=1, stride=stride,
                                       deformable_groups=1, bias=False)


def _db_conv2(module, x):
    if not module.with_dcn:
        return module.conv2(x)
    offset_mask = module.conv2_offset(x)
    # As DB: the first 18 channels are the offsets, the last 9 the mask logits.
    return module.conv2(x, offset_mask[:, :18, :, :], offset_mask[:, -9:, :, :].sigmoid())


class DBBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, dcn=None, **_):
        super().__init__()
        self.with_dcn = dcn is not None
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        if self.with_dcn:
            _db_dcn_convs(self, planes, 1, 1)
        else:
            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(_db_conv2(self, out))
        residual = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + residual)


class DBBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, dcn=None,
                 offset_stride_fix=False):
        super().__init__()
        self.with_dcn = dcn is not None
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        if self.with_dcn:
            # DB's conv2_offset has no stride (MhLiao/DB issue #250); offset_stride_fix gives it
            # the convolution's, as mmdet's and this project's DCN do.
            _db_dcn_convs(self, planes, stride, stride if offset_stride_fix else 1)
        else:
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(_db_conv2(self, out)))
        out = self.bn3(self.conv3(out))
        residual = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + residual)


class DBResNet(nn.Module):
    """DB's backbones/resnet.py ResNet: the dcn dict goes to every block of layer2..layer4
    (stage_with_dcn is stored, not used); fc and smooth exist but forward never uses them."""

    def __init__(self, block, layers, num_classes=1000, dcn=None, offset_stride_fix=False):
        super().__init__()
        self.inplanes = 64
        self.offset_stride_fix = offset_stride_fix
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2, dcn)
        self.layer3 = self._make_layer(block, 256, layers[2], 2, dcn)
        self.layer4 = self._make_layer(block, 512, layers[3], 2, dcn)
        self.avgpool = nn.AvgPool2d(7, stride=1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        self.smooth = nn.Conv2d(2048, 256, kernel_size=1, stride=1, padding=1)

    def _make_layer(self, block, planes, blocks, stride=1, dcn=None):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample, dcn=dcn,
                        offset_stride_fix=self.offset_stride_fix)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, dcn=dcn,
                                offset_stride_fix=self.offset_stride_fix))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x2 = self.layer1(x)
        x3 = self.layer2(x2)
        x4 = self.layer3(x3)
        x5 = self.layer4(x4)
        return x2, x3, x4, x5


_DB_DCN = dict(modulated=True, deformable_groups=1, fallback_on_stride=False)
DB_BACKBONES = {
    "resnet18": lambda **kw: DBResNet(DBBasicBlock, [2, 2, 2, 2], **kw),
    "deformable_resnet18": lambda **kw: DBResNet(DBBasicBlock, [2, 2, 2, 2], dcn=_DB_DCN, **kw),
    "resnet34": lambda **kw: DBResNet(DBBasicBlock, [3, 4, 6, 3], **kw),
    "resnet50": lambda **kw: DBResNet(DBBottleneck, [3, 4, 6, 3], **kw),
    "deformable_resnet50": lambda **kw: DBResNet(DBBottleneck, [3, 4, 6, 3], dcn=_DB_DCN, **kw),
    "resnet101": lambda **kw: DBResNet(DBBottleneck, [3, 4, 23, 3], **kw),
}


class SegDetector(nn.Module):
    """DB's decoders/seg_detector.py with bias=False, adaptive=True, smooth=False, serial=False
    (its experiments' decoder_args)."""

    def __init__(self, in_channels=(64, 128, 256, 512), inner_channels=256, k=10):
        super().__init__()
        self.k = k
        self.up5 = nn.Upsample(scale_factor=2, mode="nearest")
        self.up4 = nn.Upsample(scale_factor=2, mode="nearest")
        self.up3 = nn.Upsample(scale_factor=2, mode="nearest")
        self.in5 = nn.Conv2d(in_channels[-1], inner_channels, 1, bias=False)
        self.in4 = nn.Conv2d(in_channels[-2], inner_channels, 1, bias=False)
        self.in3 = nn.Conv2d(in_channels[-3], inner_channels, 1, bias=False)
        self.in2 = nn.Conv2d(in_channels[-4], inner_channels, 1, bias=False)
        quarter = inner_channels // 4
        for name, scale in (("out5", 8), ("out4", 4), ("out3", 2)):
            setattr(self, name, nn.Sequential(
                nn.Conv2d(inner_channels, quarter, 3, padding=1, bias=False),
                nn.Upsample(scale_factor=scale, mode="nearest")))
        self.out2 = nn.Conv2d(inner_channels, quarter, 3, padding=1, bias=False)
        self.binarize = self._branch(inner_channels)
        self.thresh = self._branch(inner_channels)

    @staticmethod
    def _branch(inner_channels):
        quarter = inner_channels // 4
        return nn.Sequential(
            nn.Conv2d(inner_channels, quarter, 3, padding=1, bias=False),
            nn.BatchNorm2d(quarter), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(quarter, quarter, 2, 2),
            nn.BatchNorm2d(quarter), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(quarter, 1, 2, 2), nn.Sigmoid())

    def forward(self, features, gt=None, masks=None, training=False):
        c2, c3, c4, c5 = features
        in5, in4, in3, in2 = self.in5(c5), self.in4(c4), self.in3(c3), self.in2(c2)
        out4 = self.up5(in5) + in4
        out3 = self.up4(out4) + in3
        out2 = self.up3(out3) + in2
        fuse = torch.cat((self.out5(in5), self.out4(out4), self.out3(out3), self.out2(out2)), 1)
        binary = self.binarize(fuse)
        if not training:
            return binary
        thresh = self.thresh(fuse)
        return OrderedDict(binary=binary, thresh=thresh,
                           thresh_binary=self.step_function(binary, thresh))

    def step_function(self, x, y):
        return torch.reciprocal(1 + torch.exp(-self.k * (x - y)))


class BasicModel(nn.Module):
    def __init__(self, backbone, decoder):
        super().__init__()
        self.backbone = backbone
        self.decoder = decoder

    def forward(self, data, *args, **kwargs):
        return self.decoder(self.backbone(data), *args, **kwargs)


class SegDetectorLoss(nn.Module):
    """Stands for DB's L1BalanceCELoss, which holds no tensors (nothing in the state dict)."""


class SegDetectorModel(nn.Module):
    """DB's structure/model.py: `model` is BasicModel under nn.DataParallel (so the keys are
    "model.module.*"), `criterion` the loss under nn.DataParallel."""

    def __init__(self, backbone, in_channels, inner_channels, k, offset_stride_fix=False):
        super().__init__()
        self.model = nn.DataParallel(BasicModel(
            DB_BACKBONES[backbone](offset_stride_fix=offset_stride_fix),
            SegDetector(in_channels, inner_channels, k)))
        self.criterion = nn.DataParallel(SegDetectorLoss())

    def forward(self, data, training=True):
        return self.model(data.float(), training=training)


# ---- junfu1115/DANet c7a2f60 ----

class DilatedBasicBlock(nn.Module):
    """encoding/dilated/resnet.py BasicBlock: conv1 dilated by `dilation`, conv2 by
    `previous_dilation` (the stage's). conv2_dilation_one=True undilates conv2 (as mmseg's
    BasicBlock and this project's), for showing that this is the whole difference."""
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None,
                 previous_dilation=1, norm_layer=None, conv2_dilation_one=False):
        super().__init__()
        d2 = 1 if conv2_dilation_one else previous_dilation
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, dilation, dilation, bias=False)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, d2, d2, bias=False)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        residual = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + residual)


class DilatedBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None,
                 previous_dilation=1, norm_layer=None, **_):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = norm_layer(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, dilation, dilation, bias=False)
        self.bn2 = norm_layer(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = norm_layer(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        residual = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + residual)


class DilatedResNet(nn.Module):
    """encoding/dilated/resnet.py ResNet with dilated=True (output stride 8): layer3 dilation 2,
    layer4 dilation 4, each stage's first block at half its dilation, or with multi_grid
    layer4's blocks at multi_dilation[i] (the authors' Cityscapes recipe: 4, 8, 16)."""

    def __init__(self, block, layers, num_classes=1000, norm_layer=nn.BatchNorm2d,
                 multi_grid=False, multi_dilation=None, conv2_dilation_one=False):
        super().__init__()
        self.inplanes = 64
        self.block_args = dict(norm_layer=norm_layer, conv2_dilation_one=conv2_dilation_one)
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = norm_layer(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=1, dilation=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=1, dilation=4,
                                       multi_grid=multi_grid, multi_dilation=multi_dilation)
        self.avgpool = nn.AvgPool2d(7)
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1, dilation=1, multi_grid=False,
                    multi_dilation=None):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                self.block_args["norm_layer"](planes * block.expansion))
        if multi_grid:
            first = multi_dilation[0]
        else:
            first = {1: 1, 2: 1, 4: 2}[dilation]
        layers = [block(self.inplanes, planes, stride, dilation=first, downsample=downsample,
                        previous_dilation=dilation, **self.block_args)]
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            d = multi_dilation[i % len(multi_dilation)] if multi_grid else dilation
            layers.append(block(self.inplanes, planes, dilation=d, previous_dilation=dilation,
                                **self.block_args))
        return nn.Sequential(*layers)


DANET_BACKBONES = {
    "resnet18": (DilatedBasicBlock, [2, 2, 2, 2]),
    "resnet34": (DilatedBasicBlock, [3, 4, 6, 3]),
    "resnet50": (DilatedBottleneck, [3, 4, 6, 3]),
    "resnet101": (DilatedBottleneck, [3, 4, 23, 3]),
    "resnet152": (DilatedBottleneck, [3, 8, 36, 3]),
}


class DANet(nn.Module):
    """encoding/models/danet.py DANet (BaseNet's `pretrained`, DANetHead `head`, no auxiliary
    head): forward returns the fused, position and channel logits, each upsampled bilinearly
    with align_corners=True (BaseNet's _up_kwargs). The authors' BaseNet builds resnet50/101/152
    only and DANet passes DANetHead 2048 input channels; for resnet18/34 the head takes the
    backbone's 512 (the only change), which their code never builds."""

    def __init__(self, nclass, backbone, multi_grid=False, multi_dilation=None,
                 conv2_dilation_one=False):
        super().__init__()
        block, layers = DANET_BACKBONES[backbone]
        self.pretrained = DilatedResNet(block, layers, multi_grid=multi_grid,
                                        multi_dilation=multi_dilation,
                                        conv2_dilation_one=conv2_dilation_one)
        self.head = DANetHead(512 * block.expansion, nclass)
        self._up_kwargs = {"mode": "bilinear", "align_corners": True}

    def base_forward(self, x):
        x = self.pretrained.maxpool(self.pretrained.relu(self.pretrained.bn1(
            self.pretrained.conv1(x))))
        c1 = self.pretrained.layer1(x)
        c2 = self.pretrained.layer2(c1)
        c3 = self.pretrained.layer3(c2)
        c4 = self.pretrained.layer4(c3)
        return c1, c2, c3, c4

    def forward(self, x):
        imsize = x.size()[2:]
        _, _, _, c4 = self.base_forward(x)
        return tuple(F.interpolate(y, imsize, **self._up_kwargs) for y in self.head(c4))
