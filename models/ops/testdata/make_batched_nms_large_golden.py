"""Regenerates batched_nms_large_golden.pth for nms_test: torchvision.ops.batched_nms above 4000
coordinates on CPU (more than 1000 boxes), where torchvision runs one nms per category
(_batched_nms_vanilla) instead of the coordinate-offset trick that ops_golden.pth covers. The
first two cases have distinct scores; "ties" has 20 score values among 5000 boxes: torchvision
ranks the survivors with ATen's sort without stable=True, which orders equal scores its own way
(not in input order), and BatchedNms must give the same order (the RoI sampler's draws pick
proposals by their rank). Needs the project's venv (tools/setup.sh):

    ~/.cache/vision-train/venv/bin/python3 models/ops/testdata/make_batched_nms_large_golden.py

Keys are "batched_nms_large.<case>.<name>": boxes, scores, idxs, iou_threshold (0-dim double),
keep.
"""
import os

import torch
from torchvision.ops import batched_nms

HERE = os.path.dirname(os.path.abspath(__file__))


def clustered_boxes(g, n, extent, size):
    centres = torch.rand(n // 50 + 1, 2, generator=g) * extent
    xy = centres[torch.randint(0, centres.size(0), (n,), generator=g)]
    xy = xy + torch.randn(n, 2, generator=g) * size / 8
    wh = size / 2 + torch.rand(n, 2, generator=g) * size
    return torch.cat([xy, xy + wh], dim=1)


def main():
    g = torch.Generator().manual_seed(0)
    cases = {
        # The RPN's shape: boxes in 5 levels of one image, IoU 0.7.
        "rpn_levels": (clustered_boxes(g, 5000, 512.0, 40.0), torch.randperm(5000, generator=g),
                       torch.arange(5).repeat_interleave(1000), 0.7),
        # The box head's shape: 90 classes, unevenly filled, IoU 0.5.
        "classes": (clustered_boxes(g, 1500, 300.0, 60.0), torch.randperm(1500, generator=g),
                    torch.randint(1, 91, (1500,), generator=g), 0.5),
    }
    # The RPN's shape again, with scores of 20 values (ranks 0..4999 floored to multiples of 250).
    cases["ties"] = (clustered_boxes(g, 5000, 512.0, 40.0),
                     torch.randperm(5000, generator=g) // 250 * 250,
                     torch.arange(5).repeat_interleave(1000), 0.7)
    golden = {}
    for case, (boxes, rank, idxs, thr) in cases.items():
        scores = rank.float() / rank.numel()  # distinct but in "ties"
        assert boxes.numel() > 4000
        golden[f"batched_nms_large.{case}.boxes"] = boxes
        golden[f"batched_nms_large.{case}.scores"] = scores
        golden[f"batched_nms_large.{case}.idxs"] = idxs
        golden[f"batched_nms_large.{case}.iou_threshold"] = torch.tensor(thr, dtype=torch.float64)
        golden[f"batched_nms_large.{case}.keep"] = batched_nms(boxes, scores, idxs, thr)
    torch.save(golden, os.path.join(HERE, "batched_nms_large_golden.pth"))


if __name__ == "__main__":
    main()
