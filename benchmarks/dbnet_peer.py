"""DBNet-ResNet-18 in Python PyTorch, the same network and losses as models/dbnet (FPN of
the paper with 256 inner channels, DB head with k = 50, balanced BCE with 3:1 hard negatives,
L1 on the threshold map, Dice on the binary map), timing training steps on random targets
with the same flags and output lines as models/dbnet:activation_memory_benchmark. Run by
benchmarks/dbnet_step.sh (CPU) and benchmarks/gpu/run.sh (CUDA, autocast) next to our C++
model."""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_step import PhaseTimer, param_groups, report_steps, synchronize  # noqa: E402


class DBNet(nn.Module):
    def __init__(self, inner=256, k=50.0):
        super().__init__()
        r = torchvision.models.resnet18()
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
        self.layers = nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])
        self.lateral = nn.ModuleList([nn.Conv2d(c, inner, 1, bias=False) for c in (64, 128, 256, 512)])
        self.smooth = nn.ModuleList([nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False) for _ in range(4)])
        self.prob = self._branch(inner)
        self.thresh = self._branch(inner)
        self.k = k

    @staticmethod
    def _branch(c):
        h = c // 4
        return nn.Sequential(nn.Conv2d(c, h, 3, padding=1, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                             nn.ConvTranspose2d(h, h, 2, 2), nn.BatchNorm2d(h), nn.ReLU(),
                             nn.ConvTranspose2d(h, 1, 2, 2), nn.Sigmoid())

    def forward(self, x):
        x = self.stem(x)
        feats = []
        for layer in self.layers:
            x = layer(x)
            feats.append(x)
        lat = [l(f) for l, f in zip(self.lateral, feats)]
        for i in (2, 1, 0):
            lat[i] = lat[i] + F.interpolate(lat[i + 1], size=lat[i].shape[2:], mode="nearest")
        outs = [s(l) for s, l in zip(self.smooth, lat)]
        outs = [outs[0]] + [F.interpolate(o, size=outs[0].shape[2:], mode="nearest") for o in outs[1:]]
        fuse = torch.cat(outs[::-1], 1)
        p, t = self.prob(fuse), self.thresh(fuse)
        b = torch.reciprocal(1 + torch.exp(-self.k * (p - t)))
        return p.squeeze(1), t.squeeze(1), b.squeeze(1)


def losses(p, t, b, gt, mask, thresh_map, thresh_mask):
    positive = gt * mask
    negative = (1 - gt) * mask
    n_pos = int(positive.sum())
    n_neg = min(int(negative.sum()), 3 * n_pos)
    # CUDA autocast refuses binary_cross_entropy in half precision: float32 with autocast off,
    # the precision CPU autocast gives it.
    with torch.autocast(p.device.type, enabled=False):
        bce = F.binary_cross_entropy(p.float(), gt, reduction="none")
    neg_loss, _ = (bce * negative).view(-1).topk(n_neg)
    l_prob = ((bce * positive).sum() + neg_loss.sum()) / (n_pos + n_neg + 1e-6)
    l_thresh = ((t - thresh_map).abs() * thresh_mask).sum() / (thresh_mask.sum() + 1e-6)
    inter = (b * gt * mask).sum()
    union = (b * mask).sum() + (gt * mask).sum() + 1e-6
    l_binary = 1 - 2 * inter / union
    return l_prob + 1.0 * l_binary + 10.0 * l_thresh


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none")
    parser.add_argument("--optimizer", choices=("none", "sgd"), default="none")
    parser.add_argument("--cudnn_benchmark", type=lambda v: v.lower() in ("1", "true"),
                        default=False)
    parser.add_argument("--profile_steps", type=int, default=0)
    parser.add_argument("--channels_last", type=lambda v: v.lower() in ("1", "true"),
                        default=False)
    parser.add_argument("--sync_steps", type=int, default=2)
    parser.add_argument("--checkpoint", default="")  # accepted for a shared command line
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    model = DBNet().to(device).train()
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    optimizer = (torch.optim.SGD(param_groups(model, 1e-4), lr=0.007, momentum=0.9)
                 if args.optimizer == "sgd" else None)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp == "fp16")
    n, s = args.batch, args.size
    images = torch.randn(n, 3, s, s, device=device).contiguous(memory_format=memory_format)
    gt = (torch.rand(n, s, s, device=device) > 0.9).float()
    mask = torch.ones(n, s, s, device=device)
    thresh_map = torch.rand(n, s, s, device=device) * 0.4 + 0.3
    thresh_mask = (torch.rand(n, s, s, device=device) > 0.5).float()
    timer = PhaseTimer(device, 3 if optimizer else 2)

    def step(t=None):
        if t:
            t.mark()
        if not optimizer:
            model.zero_grad()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = losses(*model(images), gt, mask, thresh_map, thresh_mask).float()
        if t:
            t.mark()
        scaler.scale(loss).backward()
        if t:
            t.mark()
        if not optimizer:
            return
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        if t:
            t.mark()

    if args.steps > 1:
        for _ in range(args.warmup):
            step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step(timer)
    synchronize(device)
    seconds = (time.perf_counter() - start) / args.steps
    print(f"python: step {seconds:.3f} s")
    ms = timer.mean_ms()
    report_steps(device, args.amp, n / seconds, ms, scaler, args.sync_steps, args.profile_steps,
                 seconds * 1000, step, optimizer=optimizer is not None)

if __name__ == "__main__":
    main()
