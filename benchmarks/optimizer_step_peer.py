"""The Python peer of //engine/optim:optimizer_step_benchmark, run by benchmarks/optimizer_step.sh.

  optimizer_step_peer.py [--threads=1 --optimizers=sgd,adamw
                          --implementations=for_loop,foreach,fused --warmup=2 --repeats=10
                          --seed=0]

torch.optim's SGD, Adam and AdamW with foreach=False (for_loop), foreach=True (foreach) and
fused=True (fused) on ResNet-50's parameter list, with the C++ binary's groups, options, seeded
values and gradients (the same generator draws the same numbers on both sides), printing the
same lines: "result <optimizer> <implementation> ms <median> check <sum of the parameters>".
The shapes are checked against torchvision's resnet50().
"""
import argparse
import time

import torch
import torchvision


def resnet50_shapes():
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,)]
            shapes += [(planes, planes, 3, 3), (planes,), (planes,)]
            shapes += [(planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if block == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    return shapes + [(1000, 2048), (1000,)]


def make(name, params, implementation):
    flags = {"for_loop": {"foreach": False}, "foreach": {"foreach": True},
             "fused": {"fused": True}}[implementation]
    decay = [p for p in params if p.dim() > 1]
    no_decay = [p for p in params if p.dim() <= 1]
    if name == "sgd":
        groups = [{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0}]
        return torch.optim.SGD(groups, lr=0.1, momentum=0.9, **flags)
    if name == "adam":
        groups = [{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0}]
        return torch.optim.Adam(groups, lr=1e-3, **flags)
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0}]
    return torch.optim.AdamW(groups, lr=1e-3, **flags)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--optimizers", default="sgd,adamw")
    parser.add_argument("--implementations", default="for_loop,foreach,fused")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    shapes = resnet50_shapes()
    reference = [tuple(p.shape) for p in torchvision.models.resnet50().parameters()]
    if shapes != reference:
        raise SystemExit("optimizer_step_peer: the shapes differ from torchvision's resnet50")
    torch.manual_seed(args.seed)
    initial = [torch.randn(shape) for shape in shapes]
    grads = [torch.randn(shape) for shape in shapes]
    print(f"params tensors {len(shapes)} values {sum(t.numel() for t in initial)} "
          f"threads {torch.get_num_threads()}")

    for name in args.optimizers.split(","):
        for implementation in args.implementations.split(","):
            params = []
            for value, grad in zip(initial, grads):
                p = value.clone().requires_grad_(True)
                p.grad = grad
                params.append(p)
            optimizer = make(name, params, implementation)
            for _ in range(args.warmup):
                optimizer.step()
            ms = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                optimizer.step()
                ms.append((time.perf_counter() - start) * 1e3)
            ms.sort()
            check = sum(p.detach().sum(dtype=torch.float64).item() for p in params)
            print(f"result {name.upper()} {implementation.upper()} ms "
                  f"{ms[len(ms) // 2] if ms else 0.0:.3f} check {check:.10e}", flush=True)


if __name__ == "__main__":
    main()
