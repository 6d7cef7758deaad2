"""Regenerates deform_conv_golden.pth for deform_conv_test: torchvision.ops.deform_conv2d (the
reference kernel, independent of ours) on small random float64 cases, with the gradients of
sum(out * probe). The checked-in file comes from PyPI torch==2.11.0 and torchvision==0.26.0 in
tools/setup.sh's venv:

    ~/.cache/vision-train/venv/bin/python3 models/ops/testdata/make_deform_conv_golden.py

A plain dict (models/ops/golden_for_test.h reads it) with keys "deform_conv.<case>.<name>"; the
case name spells stride, padding and dilation (s2p2d2).
"""
import os

import torch
from torchvision.ops import deform_conv2d

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    torch.manual_seed(2019)
    golden = {}
    for stride, padding, dilation in [(1, 1, 1), (2, 2, 2)]:
        case = f"s{stride}p{padding}d{dilation}"
        x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
        weight = torch.randn(4, 3, 3, 3, dtype=torch.float64)
        bias = torch.randn(4, dtype=torch.float64)
        out_h = (7 + 2 * padding - dilation * 2 - 1) // stride + 1
        out_w = (8 + 2 * padding - dilation * 2 - 1) // stride + 1
        # Offsets up to +-3 pixels, so some samples fall partly or wholly outside the input.
        offset = torch.empty(2, 18, out_h, out_w, dtype=torch.float64).uniform_(-3, 3)
        mask = torch.rand(2, 9, out_h, out_w, dtype=torch.float64)
        probe = torch.randn(2, 4, out_h, out_w, dtype=torch.float64)
        inputs = {"input": x, "offset": offset, "mask": mask, "weight": weight, "bias": bias}
        for tensor in inputs.values():
            tensor.requires_grad_(True)
        out = deform_conv2d(x, offset, weight, bias, stride=stride, padding=padding,
                            dilation=dilation, mask=mask)
        (out * probe).sum().backward()
        for name, tensor in inputs.items():
            golden[f"deform_conv.{case}.{name}"] = tensor.detach()
        golden[f"deform_conv.{case}.probe"] = probe
        golden[f"deform_conv.{case}.output"] = out.detach()
        for name, tensor in inputs.items():
            golden[f"deform_conv.{case}.grad_{name}"] = tensor.grad
    torch.save(golden, os.path.join(HERE, "deform_conv_golden.pth"))


if __name__ == "__main__":
    main()
