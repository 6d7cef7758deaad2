"""torchvision 0.26's Mask R-CNN R50-FPN (maskrcnn_resnet50_fpn's architecture: frozen
BatchNorm, trainable layers 2-4, 91 classes) in PyTorch 2.11: writes its seeded weights and a
batch of synthetic images with instance targets for //models/mask_rcnn:mask_rcnn_benchmark, then
times the same work: training steps (forward, backward, SGD step) and inference (detections and
masks pasted at the image size). Run by benchmarks/mask_rcnn_step.sh. The images enter
normalised and padded, bypassing GeneralizedRCNNTransform, as they enter our model from the
data pipeline. --profile_dir: after the timed training steps, --profile_steps more (forward and
backward, no optimizer step) run under torch.profiler and are written as
<profile_dir>/train_profile.json, as mask_rcnn_benchmark --profile_dir does (benchmarks/op_table.py
compares the two); with --profile=infer (or both), --profile_steps more inference batches after
the timed ones, written as <profile_dir>/infer_profile.json. On a GPU (benchmarks/gpu/run.sh):
--device=cuda, --amp (autocast; fp16 with GradScaler), the trainer's parameter groups, CUDA-event
phase times and the "summary:" line of the other step peers (benchmarks/peer_step.py)."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torchvision.models import resnet50
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.roi_heads import paste_masks_in_image
from torchvision.ops import misc as misc_nn_ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_step import PhaseTimer, param_groups, report_steps, synchronize  # noqa: E402


def build():
    torch.manual_seed(0)
    body = resnet50(weights=None, norm_layer=misc_nn_ops.FrozenBatchNorm2d)
    return MaskRCNN(_resnet_fpn_extractor(body, 3), num_classes=91)


def make_batch(size, batch, seed):
    g = torch.Generator().manual_seed(seed)
    images = torch.zeros(batch, 3, size, size)
    targets = []
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    for i in range(batch):
        low = torch.rand(1, 3, size // 16, size // 16, generator=g)
        image = F.interpolate(low, size=(size, size), mode="bilinear", align_corners=False)[0]
        boxes, masks, labels = [], [], []
        for _ in range(6):
            w, h = (int(torch.randint(size // 10, size // 3, (1,), generator=g)) for _ in range(2))
            x1 = int(torch.randint(0, size - w, (1,), generator=g))
            y1 = int(torch.randint(0, size - h, (1,), generator=g))
            m = (((yy - (y1 + h / 2)) / (h / 2)) ** 2 + ((xx - (x1 + w / 2)) / (w / 2)) ** 2) <= 1
            image[:, m] = torch.rand(3, 1, generator=g)
            ys, xs = torch.nonzero(m, as_tuple=True)
            boxes.append([xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1])
            masks.append(m.to(torch.uint8))
            labels.append(int(torch.randint(1, 91, (1,), generator=g)))
        mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        images[i] = (image - mean) / std
        targets.append({"boxes": torch.tensor(boxes, dtype=torch.float32),
                        "labels": torch.tensor(labels), "masks": torch.stack(masks)})
    return images, targets


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--write", default="")
    p.add_argument("--profile_dir", default="",
                   help="non-empty: --profile_steps more training steps (forward, backward) under "
                   "torch.profiler, written as <dir>/train_profile.json")
    p.add_argument("--profile_steps", type=int, default=2)
    p.add_argument("--profile", choices=["train", "infer", "both"], default="train",
                   help="with --profile_dir: profile training steps, inference batches or both")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none")
    p.add_argument("--cudnn_benchmark", type=lambda v: v.lower() in ("1", "true"), default=False)
    p.add_argument("--channels_last", type=lambda v: v.lower() in ("1", "true"), default=False)
    p.add_argument("--sync_steps", type=int, default=2)
    p.add_argument("--gpu_profile_steps", type=int, default=0)
    p.add_argument("--inference", type=lambda v: v.lower() in ("1", "true"), default=True)
    p.add_argument("--optimizer_implementation", default="auto")  # a shared command line
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    model = build()
    images, targets = make_batch(args.size, args.batch, seed=1)
    if args.write:
        torch.save(dict(model.state_dict()), f"{args.write}/weights.pt")
        case = {"images": images}
        for i, t in enumerate(targets):
            for k, v in t.items():
                case[f"{k}_{i}"] = v
        torch.save(case, f"{args.write}/case.pt")
        return
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=memory_format)
    images = images.to(device).contiguous(memory_format=memory_format)
    targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
    sizes = [(args.size, args.size)] * args.batch
    image_list = ImageList(images, sizes)
    # The trainer's groups over the trainable parameters (no weight decay on biases; the frozen
    # BatchNorm has none), as ours.
    optimizer = torch.optim.SGD(
        [{**g, "params": [q for q in g["params"] if q.requires_grad]}
         for g in param_groups(model, 1e-4)], lr=1e-4, momentum=0.9)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp == "fp16")
    model.train()
    times, forward, backward, update = [], [], [], []
    timer = PhaseTimer(device, 3)

    def losses():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            features = model.backbone(images)
            proposals, rpn_losses = model.rpn(image_list, features, targets)
            _, roi_losses = model.roi_heads(features, proposals, sizes, targets)
            return sum(v.float() for v in {**rpn_losses, **roi_losses}.values())

    def train_step(t=None):
        start = time.perf_counter()
        if t:
            t.mark()
        loss = losses()
        if t:
            t.mark()
        forward_done = time.perf_counter()
        scaler.scale(loss).backward()
        if t:
            t.mark()
        backward_done = time.perf_counter()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        if t:
            t.mark()
            end = time.perf_counter()
            times.append(end - start)
            forward.append(forward_done - start)
            backward.append(backward_done - forward_done)
            update.append(end - backward_done)

    for _ in range(args.warmup):  # allocators and kernels
        train_step()
    synchronize(device)
    timed_start = time.perf_counter()
    for _ in range(args.steps):
        train_step(timer)
    synchronize(device)
    mean = (time.perf_counter() - timed_start) / max(args.steps, 1)
    ms = timer.mean_ms()
    m = statistics.median
    if device.type == "cpu":
        print(f"train step {m(times):.3f} s (forward {m(forward):.3f}, backward "
              f"{m(backward):.3f}, optimizer {m(update):.3f})")
    else:
        print(f"train step {mean:.3f} s (forward {ms[0] / 1e3:.3f}, backward {ms[1] / 1e3:.3f}, "
              f"optimizer {ms[2] / 1e3:.3f})")
    report_steps(device, args.amp, args.batch / mean, ms, scaler, args.sync_steps,
                 args.gpu_profile_steps, mean * 1000, train_step)
    if args.profile_dir and not os.path.isdir(args.profile_dir):
        raise SystemExit(f"--profile_dir={args.profile_dir}: not a directory; create it first")
    if args.profile_dir and args.profile != "infer":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    record_shapes=True) as prof:
            for _ in range(args.profile_steps):
                loss = losses()
                optimizer.zero_grad()
                loss.backward()
        prof.export_chrome_trace(os.path.join(args.profile_dir, "train_profile.json"))
    if not args.inference:
        return
    model.eval()
    times = []

    def infer():
        features = model.backbone(images)
        proposals, _ = model.rpn(image_list, features)
        detections, _ = model.roi_heads(features, proposals, sizes)
        for d, s in zip(detections, sizes):
            masks = paste_masks_in_image(d["masks"], d["boxes"], s, padding=1) > 0.5

    with torch.no_grad():
        for step in range(args.warmup + args.steps):
            start = time.perf_counter()
            infer()
            synchronize(device)
            if step >= args.warmup:
                times.append(time.perf_counter() - start)
    print(f"inference {statistics.median(times):.3f} s per batch, "
          f"{args.batch / statistics.median(times):.2f} images/s")
    if args.profile_dir and args.profile != "train":
        with torch.no_grad(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(args.profile_steps):
                infer()
        prof.export_chrome_trace(os.path.join(args.profile_dir, "infer_profile.json"))


if __name__ == "__main__":
    main()
