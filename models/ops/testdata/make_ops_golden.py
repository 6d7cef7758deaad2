"""Regenerates ops_golden.pth for nms_test and roi_align_test: torchvision.ops.nms, batched_nms
and roi_align (the reference kernels, independent of ours) on small random and adversarial
inputs, with roi_align's input gradient. Needs the project's venv (tools/setup.sh):

    ~/.cache/vision-train/venv/bin/python3 models/ops/testdata/make_ops_golden.py

The file is a plain dict of tensors (torch::pickle_load reads it). Keys are "<op>.<case>.<name>":
  nms.<case>: boxes, scores, iou_threshold (0-dim double), keep
  batched_nms.<case>: boxes, scores, idxs, iou_threshold, keep
  roi_align.<case>: input, rois, probe, output, grad_input (of sum(output * probe)) and params
    = [output_height, output_width, spatial_scale, sampling_ratio, aligned] as doubles.
"""
import os

import torch
import torchvision
from torchvision.ops import batched_nms, nms, roi_align

HERE = os.path.dirname(os.path.abspath(__file__))


def random_boxes(n, extent, max_size):
    xy = torch.rand(n, 2) * extent
    wh = torch.rand(n, 2) * max_size
    return torch.cat([xy, xy + wh], dim=1)


def nms_cases():
    cases = {}
    boxes = random_boxes(300, 50.0, 40.0)
    cases["random"] = (boxes, torch.rand(300), 0.5)
    cases["random_iou07"] = (boxes, torch.rand(300), 0.7)
    # Few distinct scores: equal scores must keep their input order.
    tied_scores = torch.randint(0, 4, (200,)).float() / 4
    cases["tied_scores"] = (random_boxes(200, 40.0, 30.0), tied_scores, 0.5)
    # Duplicates, zero-area and inverted boxes (negative areas, NaN IoUs from 0 / 0), and boxes
    # touching at an edge (IoU 0 with threshold 0).
    degenerate = torch.tensor([
        [10, 10, 20, 20], [10, 10, 20, 20], [10, 10, 20, 20],
        [5, 5, 5, 5], [5, 5, 5, 5], [30, 30, 30, 40],
        [20, 20, 10, 10], [25, 25, 15, 15], [40, 40, 35, 50],
        [20, 10, 30, 20], [0, 0, 10, 10], [10, 0, 20, 10],
    ], dtype=torch.float32)
    degenerate_scores = torch.tensor([0.9, 0.9, 0.8, 0.7, 0.7, 0.6, 0.95, 0.5, 0.4, 0.85, 0.3, 0.3])
    cases["degenerate"] = (degenerate, degenerate_scores, 0.5)
    cases["degenerate_iou0"] = (degenerate, degenerate_scores, 0.0)
    cases["empty"] = (torch.zeros(0, 4), torch.zeros(0), 0.5)
    return cases


def batched_nms_cases():
    # At most 1000 boxes: above 4000 coordinates torchvision switches to per-category loops.
    boxes = random_boxes(400, 40.0, 40.0)
    return {
        "random": (boxes, torch.rand(400), torch.randint(0, 5, (400,)), 0.5),
        "tied_scores": (boxes, torch.randint(0, 3, (400,)).float(), torch.randint(0, 3, (400,)),
                        0.3),
        "empty": (torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.int64), 0.5),
    }


def roi_align_rois(batch, height, width, scale):
    # Box units are feature-map pixels / scale.
    h, w = height / scale, width / scale
    inside = random_boxes(6, min(h, w) * 0.6, min(h, w) * 0.4)
    fixed = torch.tensor([
        [0, 0, w, h],                      # the whole map, on its borders
        [0, 0, w / 3, h / 2],              # corner
        [w * 0.7, h * 0.6, w, h],          # the opposite corner, ending on the border
        [-5, -4, w + 6, h + 3],            # larger than the map
        [-30, -30, -10, -12],              # wholly outside: zero (beyond one pixel)
        [w * 0.5, h * 0.5, w * 0.5, h * 0.5],  # zero size
        [w * 0.2, h * 0.3, w * 0.2, h * 0.8],  # zero width
        [w * 0.8, h * 0.7, w * 0.3, h * 0.2],  # inverted
        [w - 0.4, h - 0.3, w + 0.5, h + 0.2],  # straddling the bottom-right border
    ])
    boxes = torch.cat([inside, fixed])
    index = (torch.arange(boxes.shape[0]) % batch).float()[:, None]
    return torch.cat([index, boxes], dim=1)


def main():
    # The pins of tools/python_requirements.txt: other versions may draw other random inputs.
    if not (torch.__version__.startswith("2.11.") and torchvision.__version__.startswith("0.26.")):
        raise SystemExit(f"needs torch 2.11 and torchvision 0.26, found {torch.__version__} and "
                         f"{torchvision.__version__}")
    torch.manual_seed(2017)
    golden = {}
    for case, (boxes, scores, thr) in nms_cases().items():
        golden[f"nms.{case}.boxes"] = boxes
        golden[f"nms.{case}.scores"] = scores
        golden[f"nms.{case}.iou_threshold"] = torch.tensor(thr, dtype=torch.float64)
        golden[f"nms.{case}.keep"] = nms(boxes, scores, thr)
    for case, (boxes, scores, idxs, thr) in batched_nms_cases().items():
        golden[f"batched_nms.{case}.boxes"] = boxes
        golden[f"batched_nms.{case}.scores"] = scores
        golden[f"batched_nms.{case}.idxs"] = idxs
        golden[f"batched_nms.{case}.iou_threshold"] = torch.tensor(thr, dtype=torch.float64)
        golden[f"batched_nms.{case}.keep"] = batched_nms(boxes, scores, idxs, thr)

    batch, channels, height, width = 2, 3, 10, 12
    for aligned in (False, True):
        for sampling_ratio in (0, 1, 2):
            for scale, size in ((1.0, (3, 4)), (0.5, (2, 2))):
                case = f"aligned{int(aligned)}_sr{sampling_ratio}_scale{scale}"
                x = torch.randn(batch, channels, height, width, requires_grad=True)
                rois = roi_align_rois(batch, height, width, scale)
                out = roi_align(x, rois, size, spatial_scale=scale, sampling_ratio=sampling_ratio,
                                aligned=aligned)
                probe = torch.randn_like(out)
                (out * probe).sum().backward()
                golden[f"roi_align.{case}.input"] = x.detach()
                golden[f"roi_align.{case}.rois"] = rois
                golden[f"roi_align.{case}.probe"] = probe
                golden[f"roi_align.{case}.output"] = out.detach()
                golden[f"roi_align.{case}.grad_input"] = x.grad
                golden[f"roi_align.{case}.params"] = torch.tensor(
                    [size[0], size[1], scale, sampling_ratio, float(aligned)], dtype=torch.float64)
    torch.save(golden, os.path.join(HERE, "ops_golden.pth"))


if __name__ == "__main__":
    main()
