"""The Python side of benchmarks/engine_overhead.sh: the same tiny model, data and step as
//engine/testing:overhead_benchmark, as a plain PyTorch loop with a DataLoader."""
import argparse
import time

import cv2
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RandomImages(torch.utils.data.Dataset):
    """Image i: uniform noise seeded by i; target: its bright pixels (gray > 127)."""

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        image = rng.integers(0, 256, size=(12, 12, 3), dtype=np.uint8)
        bright = (cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) > 127).astype(np.float32)
        rgb = cv2.cvtColor(image, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0
        return torch.from_numpy(rgb).permute(2, 0, 1), torch.from_numpy(bright)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 1, 1)

    def forward(self, x):
        return self.conv2(F.relu(self.conv1(x))).squeeze(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.steps)
    loader = torch.utils.data.DataLoader(RandomImages(), batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers, drop_last=True)
    step = 0
    start = time.perf_counter()
    while step < args.steps:
        for images, targets in loader:
            loss = (model(images) - targets).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
            schedule.step()
            step += 1
            if step % 50 == 0:
                print(f"step {step} loss {loss.item():.4f}", end="\r")
            if step == args.steps:
                break
    step_ms = (time.perf_counter() - start) * 1000 / args.steps

    images = torch.rand(args.batch, 3, 12, 12)
    targets = (torch.rand(args.batch, 12, 12) > 0.5).float()
    def model_step():
        optimizer.zero_grad()
        (model(images) - targets).pow(2).mean().backward()
        optimizer.step()
    for _ in range(20):
        model_step()
    start = time.perf_counter()
    for _ in range(args.steps):
        model_step()
    model_ms = (time.perf_counter() - start) * 1000 / args.steps
    print(f"python  step {step_ms:.3f} ms  model {model_ms:.3f} ms  overhead {step_ms - model_ms:.3f} ms")


if __name__ == "__main__":
    main()
