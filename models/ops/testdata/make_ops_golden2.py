"""Regenerates ops_golden2.pth for boxes_test, multi_scale_roi_align_test and paste_masks_test:
torchvision.ops.box_iou, clip_boxes_to_image and remove_small_boxes, the detection BoxCoder,
MultiScaleRoIAlign and roi_heads.paste_masks_in_image (the reference implementations,
independent of ours) on small random and adversarial inputs. Needs the project's venv
(tools/setup.sh):

    ~/.cache/vision-train/venv/bin/python3 models/ops/testdata/make_ops_golden2.py

A second file beside ops_golden.pth so that regenerating one never redraws the other's inputs.
A plain dict of tensors (torch::pickle_load reads it). Keys are "<op>.<case>.<name>":
  box_iou.<case>: boxes1, boxes2, iou
  box_coder.<case>: weights [4] (double), reference_boxes, proposals, encoded (of reference
    boxes against proposals), rel_codes [N, 4K], boxes [N, 4], decoded [N, 4K]
  clip_boxes.<case>: boxes, size = [height, width], clipped
  remove_small_boxes.<case>: boxes, min_size (0-dim double), keep
  multi_scale_roi_align.<case>: feature0..feature2, boxes0..boxes<B-1>, image_sizes [B, 2],
    params = [output_size, sampling_ratio] (int64), output
  paste_masks.<case>: masks [N, 1, M, M], boxes [N, 4], size = [height, width], pasted
    [N, 1, height, width]
"""
import math
import os

import torch
import torchvision
from torchvision.models.detection._utils import BoxCoder
from torchvision.models.detection.roi_heads import paste_masks_in_image
from torchvision.ops import MultiScaleRoIAlign, box_iou, clip_boxes_to_image, remove_small_boxes

HERE = os.path.dirname(os.path.abspath(__file__))


def random_boxes(n, extent, max_size):
    xy = torch.rand(n, 2) * extent
    wh = torch.rand(n, 2) * max_size
    return torch.cat([xy, xy + wh], dim=1)


def adversarial_boxes(w, h):
    """Boxes on the borders, larger than the image, outside it, zero-area and inverted."""
    return torch.tensor([
        [0, 0, w, h],                      # the whole image, on its borders
        [0, 0, w / 3, h / 2],              # a corner
        [w * 0.7, h * 0.6, w, h],          # the opposite corner, ending on the border
        [-5, -4, w + 6, h + 3],            # larger than the image
        [-30, -30, -10, -12],              # wholly outside
        [w * 0.5, h * 0.5, w * 0.5, h * 0.5],  # zero size
        [w * 0.2, h * 0.3, w * 0.2, h * 0.8],  # zero width
        [w * 0.8, h * 0.7, w * 0.3, h * 0.2],  # inverted
        [w - 0.4, h - 0.3, w + 0.5, h + 0.2],  # straddling the bottom-right border
    ], dtype=torch.float32)


def main():
    # The pins of tools/python_requirements.txt: other versions may draw other random inputs.
    if not (torch.__version__.startswith("2.11.") and torchvision.__version__.startswith("0.26.")):
        raise SystemExit(f"needs torch 2.11 and torchvision 0.26, found {torch.__version__} and "
                         f"{torchvision.__version__}")
    torch.manual_seed(2018)
    golden = {}

    def put(op, case, **tensors):
        for name, value in tensors.items():
            golden[f"{op}.{case}.{name}"] = value

    adversarial = adversarial_boxes(40.0, 30.0)
    iou_cases = {
        "random": (random_boxes(30, 50.0, 30.0), random_boxes(20, 50.0, 30.0)),
        "adversarial": (adversarial, torch.cat([adversarial, random_boxes(5, 40.0, 30.0)])),
        "empty1": (torch.zeros(0, 4), random_boxes(3, 10.0, 5.0)),
        "empty_both": (torch.zeros(0, 4), torch.zeros(0, 4)),
    }
    for case, (b1, b2) in iou_cases.items():
        put("box_iou", case, boxes1=b1, boxes2=b2, iou=box_iou(b1, b2))

    # Positive-area proposals and references for encode (torchvision divides by the proposal's
    # size and takes the log of the reference's), adversarial boxes for decode, which handles
    # any size; large codes exercise bbox_xform_clip.
    positive = random_boxes(25, 60.0, 40.0) + torch.tensor([0, 0, 0.5, 0.5])
    coder_cases = {
        "rpn_weights": ((1.0, 1.0, 1.0, 1.0), positive, random_boxes(25, 60.0, 40.0) + 1,
                        torch.randn(25, 4), random_boxes(25, 60.0, 40.0)),
        "roi_weights_multiclass": ((10.0, 10.0, 5.0, 5.0), random_boxes(9, 30.0, 20.0) + 0.5,
                                   positive[:9], torch.randn(9, 12) * 3,
                                   adversarial),
        "clipped_codes": ((1.0, 1.0, 1.0, 1.0), positive[:4], positive[4:8],
                          torch.tensor([[0.1, -0.2, 10.0, 5.0], [0.0, 0.0, -10.0, 100.0],
                                        [0.3, 0.4, math.log(1000.0 / 16), 4.1],
                                        [-1.0, 2.0, 4.2, -3.0]]),
                          positive[8:12]),
        "empty": ((1.0, 1.0, 1.0, 1.0), torch.zeros(0, 4), torch.zeros(0, 4),
                  torch.zeros(0, 4), torch.zeros(0, 4)),
    }
    for case, (weights, reference, proposals, rel_codes, boxes) in coder_cases.items():
        coder = BoxCoder(weights)
        decoded = coder.decode_single(rel_codes, boxes)
        put("box_coder", case, weights=torch.tensor(weights, dtype=torch.float64),
            reference_boxes=reference, proposals=proposals,
            encoded=coder.encode_single(reference, proposals), rel_codes=rel_codes, boxes=boxes,
            decoded=decoded)

    clip_cases = {
        "adversarial": (torch.cat([adversarial, random_boxes(6, 60.0, 30.0) - 10]), (30, 40)),
        "multiclass": (random_boxes(8, 50.0, 30.0).repeat(1, 3) - 5, (25, 33)),
        "empty": (torch.zeros(0, 4), (10, 10)),
    }
    for case, (boxes, size) in clip_cases.items():
        put("clip_boxes", case, boxes=boxes, size=torch.tensor(size),
            clipped=clip_boxes_to_image(boxes, size))

    small_cases = {
        "adversarial": (torch.cat([adversarial, random_boxes(20, 40.0, 3.0)]), 1.0),
        "exact_size": (torch.tensor([[0, 0, 2, 2], [0, 0, 1.999, 2], [1, 1, 3, 3.5],
                                     [2, 2, 2, 2]], dtype=torch.float32), 2.0),
        "zero_min": (adversarial, 0.0),
        "empty": (torch.zeros(0, 4), 1.0),
    }
    for case, (boxes, min_size) in small_cases.items():
        put("remove_small_boxes", case, boxes=boxes,
            min_size=torch.tensor(min_size, dtype=torch.float64),
            keep=remove_small_boxes(boxes, min_size))

    # A 3-level pyramid (strides 4, 8, 16) over a batch of two images of different sizes; box
    # sizes spread across the level boundaries, with boxes on the borders, larger than the
    # image, zero-size (the lowest level) and an empty image.
    def msra_case(image_sizes, boxes, output_size, sampling_ratio, channels=3):
        max_h = max(s[0] for s in image_sizes)
        max_w = max(s[1] for s in image_sizes)
        features = {f"feat{i}": torch.randn(len(boxes), channels, max_h // 2 ** (i + 2),
                                            max_w // 2 ** (i + 2)) for i in range(3)}
        pooler = MultiScaleRoIAlign(list(features), output_size, sampling_ratio)
        output = pooler(features, boxes, image_sizes)
        case = {f"feature{i}": features[f"feat{i}"] for i in range(3)}
        case.update({f"boxes{i}": b for i, b in enumerate(boxes)})
        case["image_sizes"] = torch.tensor(image_sizes)
        case["params"] = torch.tensor([output_size, sampling_ratio])
        case["output"] = output
        return case

    def spread_boxes(n, h, w):
        xy = torch.rand(n, 2) * torch.tensor([w, h]) * 0.5
        side = torch.exp(torch.rand(n, 1) * math.log(h * 1.5 / 4)) * 4
        return torch.cat([xy, xy + side * (0.5 + torch.rand(n, 2))], dim=1)

    msra_cases = {
        "random_sr2": msra_case([(192, 256), (160, 224)],
                                [spread_boxes(20, 192, 256), spread_boxes(15, 160, 224)], 3, 2),
        "adversarial_sr0": msra_case([(192, 256), (192, 256)],
                                     [adversarial_boxes(256.0, 192.0),
                                      # Inverted along one axis: a negative area, no level.
                                      torch.cat([spread_boxes(5, 192, 256),
                                                 torch.tensor([[30.0, 5.0, 10.0, 20.0]])])],
                                     2, 0),
        "empty_image": msra_case([(128, 128), (128, 128)],
                                 [torch.zeros(0, 4), spread_boxes(6, 128, 128)], 2, 1),
    }
    for case, tensors in msra_cases.items():
        put("multi_scale_roi_align", case, **tensors)

    # paste_masks_in_image slices the image with Python slices, whose negative ends wrap
    # around: boxes wholly left of or above the image fail there, so they are left to the C++
    # test of our documented semantics (nothing pasted).
    def paste_case(masks, boxes, size):
        pasted = paste_masks_in_image(masks, boxes, size)
        return dict(masks=masks, boxes=boxes, size=torch.tensor(size), pasted=pasted)

    paste_adversarial = torch.tensor([
        [0, 0, 40, 30], [0, 0, 13.3, 15], [28, 18, 40, 30], [-5, -4, 46, 33],
        [20, 15, 20, 15], [8, 9, 8, 24], [32, 21, 12, 6], [39.6, 29.7, 40.5, 30.2],
        [10.5, 3.7, 11.2, 4.1], [0.2, 0.9, 39.9, 29.9],
    ], dtype=torch.float32)
    paste_cases = {
        "random_m7": paste_case(torch.rand(12, 1, 7, 7), random_boxes(12, 40.0, 25.0) - 3,
                                (36, 45)),
        "adversarial_m5": paste_case(torch.rand(10, 1, 5, 5), paste_adversarial, (30, 40)),
        "large_boxes_m28": paste_case(torch.rand(3, 1, 28, 28),
                                      torch.tensor([[-10.0, -7.0, 80.0, 50.0],
                                                    [3.0, 2.0, 61.0, 47.0],
                                                    [5.5, 6.5, 9.5, 60.0]]), (48, 64)),
        "empty": paste_case(torch.zeros(0, 1, 4, 4), torch.zeros(0, 4), (5, 6)),
    }
    for case, tensors in paste_cases.items():
        put("paste_masks", case, **tensors)

    torch.save(golden, os.path.join(HERE, "ops_golden2.pth"))


if __name__ == "__main__":
    main()
