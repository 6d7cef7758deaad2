"""Regenerates danet_golden.pth for danet_head_test: DANet's position attention module (PAM),
channel attention module (CAM) and head, written here in PyTorch from the paper (Fu et al.,
"Dual Attention Network for Scene Segmentation", CVPR 2019, section 3 and figures 2-3) and the
structure of the authors' published DANetHead/PAM_Module/CAM_Module (same submodule names), with
fixed random weights, gamma set non-zero so that the attention paths count. Needs the project's
venv (tools/setup.sh):

    ~/.cache/vision-train/venv/bin/python models/danet/testdata/make_danet_golden.py

The file is a plain dict of float32 tensors (torch::pickle_load reads it), keys "<case>/<name>":
  <case>/param/<parameter or buffer name>: the module's state before the forward
  <case>/input, <case>/probe*: input and fixed random projections of the outputs
  <case>/<output>: outputs; <case>/grad_input and <case>/grad/<name>: gradients of
  sum(output * probe) (summed over the outputs) with respect to the input and the gammas
Cases: pam (C=64, 8x8, N=1), cam (same), head_eval (in 64 -> 16 channels, 5 classes, 8x8, N=2,
eval mode, random running statistics), head_train (head_eval's weights and input, stored once,
in training mode with dropout 0: batch statistics; <case>/after/<name>: the running statistics
after the step).
"""
import os

import torch
from torch import nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class PAM(nn.Module):
    """Position attention: softmax over positions of query-key energies, out = gamma * Vattn + x."""

    def __init__(self, channels, reduction=8):
        super().__init__()
        self.query_conv = nn.Conv2d(channels, channels // reduction, 1)
        self.key_conv = nn.Conv2d(channels, channels // reduction, 1)
        self.value_conv = nn.Conv2d(channels, channels, 1)
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        n, c, h, w = x.shape
        q = self.query_conv(x).reshape(n, -1, h * w).permute(0, 2, 1)
        k = self.key_conv(x).reshape(n, -1, h * w)
        attention = torch.softmax(torch.bmm(q, k), dim=-1)
        v = self.value_conv(x).reshape(n, -1, h * w)
        out = torch.bmm(v, attention.permute(0, 2, 1)).reshape(n, c, h, w)
        return self.gamma * out + x


class CAM(nn.Module):
    """Channel attention: softmax of rowmax(X X^T) - X X^T, out = gamma * attn X + x."""

    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        n, c, h, w = x.shape
        flat = x.reshape(n, c, -1)
        energy = torch.bmm(flat, flat.permute(0, 2, 1))
        energy_new = torch.max(energy, -1, keepdim=True)[0].expand_as(energy) - energy
        attention = torch.softmax(energy_new, dim=-1)
        out = torch.bmm(attention, flat).reshape(n, c, h, w)
        return self.gamma * out + x


def conv_bn_relu(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU())


class Head(nn.Module):
    def __init__(self, in_channels, num_classes, dropout=0.1):
        super().__init__()
        inter = in_channels // 4
        self.conv5a = conv_bn_relu(in_channels, inter)
        self.conv5c = conv_bn_relu(in_channels, inter)
        self.sa = PAM(inter)
        self.sc = CAM()
        self.conv51 = conv_bn_relu(inter, inter)
        self.conv52 = conv_bn_relu(inter, inter)
        self.conv6 = nn.Sequential(nn.Dropout2d(dropout), nn.Conv2d(inter, num_classes, 1))
        self.conv7 = nn.Sequential(nn.Dropout2d(dropout), nn.Conv2d(inter, num_classes, 1))
        self.conv8 = nn.Sequential(nn.Dropout2d(dropout), nn.Conv2d(inter, num_classes, 1))

    def forward(self, x):
        sa_conv = self.conv51(self.sa(self.conv5a(x)))
        sc_conv = self.conv52(self.sc(self.conv5c(x)))
        return self.conv8(sa_conv + sc_conv), self.conv6(sa_conv), self.conv7(sc_conv)


def randomise(module, generator):
    # Default initialisations leave biases, BN affines and running statistics trivial; random
    # values make every one of them count.
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if name.endswith("num_batches_tracked"):
                continue
            if name.endswith("running_var"):
                tensor.copy_(0.5 + torch.rand(tensor.shape, generator=generator))
            elif name.endswith("gamma"):
                tensor.fill_(0.0)  # set by the caller
            else:
                tensor.copy_(0.3 * torch.randn(tensor.shape, generator=generator))


def state(prefix, module):
    return {f"{prefix}/param/{k}": v.detach().clone() for k, v in module.state_dict().items()}


def run_case(golden, name, module, x, output_names, generator, store_inputs=True):
    if store_inputs:
        golden.update(state(name, module))
        golden[f"{name}/input"] = x.detach().clone()
    x = x.clone().requires_grad_(True)
    outputs = module(x)
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    total = 0
    for out_name, out in zip(output_names, outputs):
        probe = torch.randn(out.shape, generator=generator)
        golden[f"{name}/{out_name}"] = out.detach().clone()
        golden[f"{name}/probe_{out_name}"] = probe
        total = total + (out * probe).sum()
    total.backward()
    golden[f"{name}/grad_input"] = x.grad.detach().clone()
    for param_name, param in module.named_parameters():
        if param_name.endswith("gamma"):
            golden[f"{name}/grad/{param_name}"] = param.grad.detach().clone()
    for buffer_name, buffer in module.named_buffers():
        if buffer_name.endswith("running_mean") or buffer_name.endswith("running_var"):
            golden[f"{name}/after/{buffer_name}"] = buffer.detach().clone()


def main():
    generator = torch.Generator().manual_seed(14)
    golden = {}

    pam = PAM(64)
    randomise(pam, generator)
    with torch.no_grad():
        pam.gamma.fill_(0.7)
    run_case(golden, "pam", pam, torch.randn(1, 64, 8, 8, generator=generator), ["output"],
             generator)

    cam = CAM()
    with torch.no_grad():
        cam.gamma.fill_(0.5)
    # Scaled so that the channel energies (sums over 64 positions) leave a softmax that is not
    # one-hot.
    run_case(golden, "cam", cam, 0.25 * torch.randn(1, 64, 8, 8, generator=generator),
             ["output"], generator)

    head = Head(64, 5)
    randomise(head, generator)
    with torch.no_grad():
        head.sa.gamma.fill_(0.6)
        head.sc.gamma.fill_(0.4)
    head_input = torch.randn(2, 64, 8, 8, generator=generator)
    head.eval()
    run_case(golden, "head_eval", head, head_input, ["fused", "position", "channel"], generator)

    head.zero_grad()
    for module in head.modules():
        if isinstance(module, nn.Dropout2d):
            module.p = 0.0
    head.train()
    # Weights and input are head_eval's (not stored twice).
    run_case(golden, "head_train", head, head_input, ["fused", "position", "channel"], generator,
             store_inputs=False)

    torch.save(golden, os.path.join(HERE, "danet_golden.pth"))
    print(f"wrote {len(golden)} tensors, torch {torch.__version__}")


if __name__ == "__main__":
    main()
