"""The Python peer of models/ops:ops_benchmark, run by benchmarks/ops_vs_torchvision.sh.

  ops_peer.py --make-inputs=PATH [--seed=0]   writes the inputs both sides time (a plain dict
                                              of tensors, torch.save) and exits
  ops_peer.py --inputs=PATH [--threads=1 --repeats=20 --warmup=3]
                                              times torchvision.ops on them, printing the same
                                              lines as the C++ binary

Inputs: NMS of 5,000 boxes of 10-200 px (width and height uniform) placed uniformly inside an
800x800 image, scores uniform in [0, 1), IoU 0.7; MultiScaleRoIAlign of 512 boxes (square root
of the area log-uniform in [16, 640] px, aspect ratio log-uniform in [1/2, 2], so that every FPN
level gets some; placed uniformly inside the image) over a 1x256 pyramid at strides 4, 8, 16, 32
(200, 100, 50, 25 px square), output 7x7, sampling ratio 2, forward then backward of sum() with
respect to the features.
"""
import argparse
import math
import statistics
import time

import torch
import torchvision
from torchvision.ops import MultiScaleRoIAlign, nms

IMAGE = 800


def boxes_in_image(gen, n, w, h):
    x1 = torch.rand(n, generator=gen) * (IMAGE - w)
    y1 = torch.rand(n, generator=gen) * (IMAGE - h)
    return torch.stack([x1, y1, x1 + w, y1 + h], 1).float()


def make_inputs(path, seed):
    gen = torch.Generator().manual_seed(seed)
    n = 5000
    w = 10 + torch.rand(n, generator=gen) * 190
    h = 10 + torch.rand(n, generator=gen) * 190
    inputs = {"nms_boxes": boxes_in_image(gen, n, w, h),
              "nms_scores": torch.rand(n, generator=gen)}
    k = 512
    scale = torch.exp(math.log(16) + torch.rand(k, generator=gen) * math.log(640 / 16))
    ratio = torch.exp((torch.rand(k, generator=gen) * 2 - 1) * math.log(2)).sqrt()
    w = (scale * ratio).clamp(max=IMAGE)
    h = (scale / ratio).clamp(max=IMAGE)
    inputs["rois"] = boxes_in_image(gen, k, w, h)
    for level, stride in enumerate((4, 8, 16, 32)):
        inputs[f"feat{level}"] = torch.randn(1, 256, IMAGE // stride, IMAGE // stride,
                                             generator=gen)
    torch.save(inputs, path)


def median_ms(warmup, repeats, run):
    for _ in range(warmup):
        run()
    ms = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        ms.append((time.perf_counter() - start) * 1e3)
    return statistics.median(ms)


def bench(args):
    torch.set_num_threads(args.threads)
    inputs = torch.load(args.inputs)
    boxes, scores = inputs["nms_boxes"], inputs["nms_scores"]
    out = {}

    def run_nms():
        out["keep"] = nms(boxes, scores, 0.7)

    nms_ms = median_ms(args.warmup, args.repeats, run_nms)

    names = [str(i) for i in range(4)]
    features = {str(i): inputs[f"feat{i}"].clone().requires_grad_(True) for i in range(4)}
    pool = MultiScaleRoIAlign(names, output_size=7, sampling_ratio=2)
    rois = [inputs["rois"]]
    sizes = [(IMAGE, IMAGE)]

    def run_roi_align():
        for f in features.values():
            f.grad = None
        out["pooled"] = pool(features, rois, sizes)
        out["pooled"].sum().backward()

    roi_ms = median_ms(args.warmup, args.repeats, run_roi_align)
    grad_sum = sum(float(f.grad.double().sum()) for f in features.values())
    keep = out["keep"]
    print(f"threads {torch.get_num_threads()}")
    print(f"nms_ms {nms_ms:.3f}")
    print(f"roi_align_ms {roi_ms:.3f}")
    print(f"check nms_kept {keep.numel()} keep_sum {int(keep.sum())} "
          f"pooled_sum {float(out['pooled'].detach().double().sum()):.4f} grad_sum {grad_sum:.4f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--make-inputs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inputs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    if args.make_inputs:
        make_inputs(args.make_inputs, args.seed)
    else:
        bench(args)


if __name__ == "__main__":
    main()
