"""DANet in Python PyTorch, the same network, losses and update as models/danet (a dilated
ResNet in torchvision's layout at output stride 8 with multi-grid in layer4, the authors' head
with position and channel attention, three cross-entropy losses with ignore index 255, SGD with
momentum 0.9 and weight decay 1e-4 off norms and biases, as the trainer groups them), timing
training steps on random images and labels with the same flags and output lines as
//models/danet:danet_step_benchmark, on the CPU or CUDA, in float32 or under autocast (fp16 with
GradScaler). Run by benchmarks/danet_step.sh (CPU) and benchmarks/gpu/run.sh (CUDA)."""
import argparse
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The attention modules and the head: the reference the head's golden test is made from.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                                "danet", "testdata"))
from make_danet_golden import Head  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_step import PhaseTimer, param_groups, report_steps, synchronize  # noqa: E402


class Block(nn.Module):
    """BasicBlock (dilation on the first 3x3, as ours and mmseg) or Bottleneck (v1.5)."""

    def __init__(self, cin, planes, stride, dilation, bottleneck, downsample):
        super().__init__()
        self.bottleneck = bottleneck
        out = planes * (4 if bottleneck else 1)
        if bottleneck:
            self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, dilation, dilation, bias=False)
            self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
        else:
            self.conv1 = nn.Conv2d(cin, planes, 3, stride, dilation, dilation, bias=False)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.bottleneck:
            out = self.bn3(self.conv3(F.relu(out)))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class DilatedResNet(nn.Module):
    def __init__(self, depth, multi_grid):
        super().__init__()
        blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3]}[depth]
        self.bottleneck = depth >= 50
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.cin, self.dilation = 64, 1
        self.layer1 = self._stage(64, blocks[0], 1, False, None)
        self.layer2 = self._stage(128, blocks[1], 2, False, None)
        self.layer3 = self._stage(256, blocks[2], 2, True, None)
        self.layer4 = self._stage(512, blocks[3], 2, True, multi_grid)

    def _stage(self, planes, n, stride, dilate, grid):
        expansion = 4 if self.bottleneck else 1
        previous = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self.cin != planes * expansion:
            downsample = nn.Sequential(nn.Conv2d(self.cin, planes * expansion, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes * expansion))
        layers = []
        for b in range(n):
            dilation = self.dilation * grid[b] if grid else (previous if b == 0 else self.dilation)
            layers.append(Block(self.cin, planes, stride if b == 0 else 1, dilation, self.bottleneck,
                                downsample if b == 0 else None))
            self.cin = planes * expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.layer4(self.layer3(x))


class DANet(nn.Module):
    def __init__(self, depth, classes):
        super().__init__()
        self.backbone = DilatedResNet(depth, [1, 2, 4] if depth >= 50 else [1, 2])
        self.head = Head(2048 if depth >= 50 else 512, classes)

    def forward(self, x):
        size = x.shape[2:]
        outs = self.head(self.backbone(x))
        return [F.interpolate(o, size, mode="bilinear", align_corners=True) for o in outs]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=18)
    parser.add_argument("--height", type=int, default=128)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none")
    parser.add_argument("--channels_last", type=lambda v: v.lower() in ("1", "true"),
                        default=False)
    parser.add_argument("--cudnn_benchmark", type=lambda v: v.lower() in ("1", "true"),
                        default=False)
    parser.add_argument("--profile_steps", type=int, default=0)
    parser.add_argument("--sync_steps", type=int, default=2)
    parser.add_argument("--optimizer_implementation", default="auto")  # a shared command line
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    torch.manual_seed(0)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    model = DANet(args.depth, 19).to(device).train()
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    optimizer = torch.optim.SGD(param_groups(model, 1e-4), lr=0.01, momentum=0.9)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp == "fp16")
    images = torch.randn(args.batch, 3, args.height, args.width, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, 19, (args.batch, args.height, args.width), device=device)
    timer = PhaseTimer(device, 3)
    last = []

    def step(t=None):
        # Phases: forward with the losses, backward, optimizer (unscale-and-check, step,
        # zero_grad), as ours.
        if t:
            t.mark()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = sum(F.cross_entropy(o.float(), labels, ignore_index=255)
                       for o in model(images))
        if t:
            t.mark()
        scaler.scale(loss).backward()
        if t:
            t.mark()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        if t:
            t.mark()
        last[:] = [loss]

    # CPU: each step timed by the wall clock, the median reported (as before the GPU flags).
    seconds = []
    for i in range(args.warmup if args.steps > 1 else 0):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        begin = time.perf_counter()
        step(timer)
        if device.type == "cpu":
            seconds.append(time.perf_counter() - begin)
    synchronize(device)
    mean = (time.perf_counter() - start) / args.steps
    seconds = sorted(seconds) or [mean]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"DANet-ResNet-{args.depth} {args.height}x{args.width} batch {args.batch} threads "
          f"{args.threads}: median step {seconds[len(seconds) // 2]:.4f} s, peak RSS "
          f"{peak_mib:.0f} MiB (last loss {last[0].item():.4f})")
    ms = timer.mean_ms()
    report_steps(device, args.amp, args.batch / mean, ms, scaler, args.sync_steps,
                 args.profile_steps, mean * 1000, step)

if __name__ == "__main__":
    main()
