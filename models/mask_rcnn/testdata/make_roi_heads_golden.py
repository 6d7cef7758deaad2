"""Regenerates roi_heads_golden.pth for roi_heads_test: torchvision's RoIHeads (TwoMLPHead,
FastRCNNPredictor, MaskRCNNHeads, MaskRCNNPredictor, MultiScaleRoIAlign over four levels) at small
widths, and its project_masks_on_boxes, on seeded inputs. Needs the project's venv
(tools/setup.sh):

    ~/.cache/vision-train/venv/bin/python3 models/mask_rcnn/testdata/make_roi_heads_golden.py

A plain dict of tensors (torch::pickle_load reads it; models/ops/golden_for_test.h splits the
keys "<op>.<case>.<name>" at the first and last dots):
  weights.<module path>.<weight|bias>: every parameter under our names (RoiHeadsImpl's
    box_head.fc6, ..., mask_head.mask_fcn<k>, mask_predictor.conv5_mask/mask_fcn_logits), mapped
    from torchvision's (its MaskRCNNHeads' "mask_head.<k-1>.0")
  config.heads.<name>: in_channels, num_classes, representation_size, mask_head_channels,
    score_threshold, nms_threshold, detections_per_image
  features.batch.p2..p5 [2, C, H_l, W_l], image_sizes [2, 2] (height, width)
  eval.batch.proposals<i>, boxes<i>, scores<i>, labels<i>, mask_probs<i> [D, 1, 28, 28]
  targets.batch.gt_boxes<i>, gt_labels<i>, gt_masks<i> (uint8 [G, H_i, W_i])
  train.<case>.has_gt [2] bool (whether image i gets targets.batch's ground truth or none),
    proposals<i>, loss_classifier, loss_box_reg, loss_mask, and the gradients of their sum:
    grad_cls_score, grad_mask_fcn1, grad_mask_fcn_logits (weights) and, in the case both only,
    grad_fc6 and grad_p2..grad_p5 (features). Cases: both (ground truth in both images),
    one_empty (none in the second image, whose RoIs are then all background), no_positive
    (none in either: loss_mask is 0 and the mask weights' gradients 0)
  mask_targets.inputs.gt_masks (uint8), boxes, matched; mask_targets.m<M>.resolution (0-dim
    int64), targets (project_masks_on_boxes of the inputs at M x M)
batch_size_per_image (512) exceeds the candidates, so sampling takes all of them on both sides.
"""
import os

import torch
import torchvision
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.models.detection.roi_heads import RoIHeads, project_masks_on_boxes
from torchvision.ops import MultiScaleRoIAlign

HERE = os.path.dirname(os.path.abspath(__file__))

IN_CHANNELS = 8
NUM_CLASSES = 4
REPRESENTATION = 32
MASK_CHANNELS = [8, 8, 8]
SCORE_THRESHOLD = 0.05
NMS_THRESHOLD = 0.5
DETECTIONS = 20
IMAGE_SIZES = [(64, 96), (56, 80)]  # the batch is padded to 64 x 96


def build_heads():
    levels = ["0", "1", "2", "3"]
    heads = RoIHeads(
        box_roi_pool=MultiScaleRoIAlign(levels, 7, 2),
        box_head=TwoMLPHead(IN_CHANNELS * 7 * 7, REPRESENTATION),
        box_predictor=FastRCNNPredictor(REPRESENTATION, NUM_CLASSES),
        fg_iou_thresh=0.5, bg_iou_thresh=0.5, batch_size_per_image=512, positive_fraction=0.25,
        bbox_reg_weights=None, score_thresh=SCORE_THRESHOLD, nms_thresh=NMS_THRESHOLD,
        detections_per_img=DETECTIONS,
        mask_roi_pool=MultiScaleRoIAlign(levels, 14, 2),
        mask_head=MaskRCNNHeads(IN_CHANNELS, MASK_CHANNELS, 1),
        mask_predictor=MaskRCNNPredictor(MASK_CHANNELS[-1], MASK_CHANNELS[-1], NUM_CLASSES))
    with torch.no_grad():
        heads.box_predictor.cls_score.weight.mul_(8.0)
        # Bolder deltas than the default initialisation gives, so decoding moves the boxes.
        heads.box_predictor.bbox_pred.weight.mul_(4.0)
    return heads


def set_class_biases(heads, features, proposals):
    """Biases that put the mean class logits over `proposals` at 0.3, 0.2, 0.2, -1.6: classes 1
    and 2 both detected, class 3 mostly under the score threshold, so the threshold, the
    per-class NMS and the top-k all have something to do."""
    with torch.no_grad():
        pooled = heads.box_roi_pool(features, proposals, IMAGE_SIZES)
        logits, _ = heads.box_predictor(heads.box_head(pooled))
        bias = heads.box_predictor.cls_score.bias
        bias.add_(torch.tensor([0.3, 0.2, 0.2, -1.6]) - logits.mean(0))


def our_name(name):
    """torchvision's parameter name -> RoiHeadsImpl's."""
    parts = name.split(".")
    if parts[0] == "mask_head":  # mask_head.<k>.0.weight -> mask_head.mask_fcn<k+1>.weight
        return f"mask_head.mask_fcn{int(parts[1]) + 1}.{parts[-1]}"
    return name


def random_boxes(n, height, width, min_size, max_size):
    wh = torch.rand(n, 2) * (max_size - min_size) + min_size
    xy = torch.rand(n, 2) * (torch.tensor([width, height]) - wh).clamp(min=1)
    return torch.cat([xy, xy + wh], 1)


def masks_in_boxes(boxes, height, width):
    """An ellipse filling each box, with a random hole, as uint8 [G, H, W]."""
    ys = torch.arange(height).float()[:, None] + 0.5
    xs = torch.arange(width).float()[None, :] + 0.5
    masks = []
    for x1, y1, x2, y2 in boxes.tolist():
        cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
        inside = ((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2 <= 1
        hole = ((xs - cx - rx / 3) / (rx / 4)) ** 2 + ((ys - cy) / (ry / 4)) ** 2 <= 1
        masks.append((inside & ~hole).to(torch.uint8))
    return torch.stack(masks) if masks else torch.zeros(0, height, width, dtype=torch.uint8)


def proposals_near(gt, height, width, count):
    """Jittered copies of the ground truth (IoUs around the 0.5 threshold), random boxes, one
    box larger than the image (pooled from a coarse level)."""
    jittered = []
    for box in gt:
        size = torch.cat([box[2:] - box[:2]] * 2)
        for scale in (0.05, 0.15, 0.3):
            jittered.append(box + torch.randn(4) * size * scale)
    boxes = torch.cat([torch.stack(jittered) if jittered else torch.zeros(0, 4),
                       random_boxes(count, height, width, 6.0, 40.0),
                       torch.tensor([[-70.0, -60.0, width + 50.0, height + 60.0],
                                     [-150.0, -140.0, width + 150.0, height + 160.0]])])
    x1y1 = torch.minimum(boxes[:, :2], boxes[:, 2:] - 2)
    return torch.cat([x1y1, boxes[:, 2:]], 1)


def main():
    # The pins of tools/python_requirements.txt: other versions may draw other random inputs.
    if not (torch.__version__.startswith("2.11.") and torchvision.__version__.startswith("0.26.")):
        raise SystemExit(f"needs torch 2.11 and torchvision 0.26, found {torch.__version__} and "
                         f"{torchvision.__version__}")
    torch.manual_seed(2017)
    golden = {}

    def put(op, case, **tensors):
        for name, value in tensors.items():
            golden[f"{op}.{case}.{name}"] = value.detach().clone()

    heads = build_heads()
    put("config", "heads", in_channels=torch.tensor(IN_CHANNELS),
        num_classes=torch.tensor(NUM_CLASSES), representation_size=torch.tensor(REPRESENTATION),
        mask_head_channels=torch.tensor(MASK_CHANNELS),
        score_threshold=torch.tensor(SCORE_THRESHOLD, dtype=torch.float64),
        nms_threshold=torch.tensor(NMS_THRESHOLD, dtype=torch.float64),
        detections_per_image=torch.tensor(DETECTIONS))

    padded = (64, 96)
    features = [torch.randn(2, IN_CHANNELS, padded[0] // s, padded[1] // s) for s in (4, 8, 16, 32)]
    put("features", "batch", p2=features[0], p3=features[1], p4=features[2], p5=features[3],
        image_sizes=torch.tensor(IMAGE_SIZES))
    feature_dict = lambda fs: {str(l): f for l, f in enumerate(fs)}

    gt = [random_boxes(3, *IMAGE_SIZES[0], 10.0, 45.0),
          random_boxes(2, *IMAGE_SIZES[1], 10.0, 40.0)]
    gt_labels = [torch.tensor([1, 2, 3]), torch.tensor([2, 1])]

    heads.eval()
    proposals = [proposals_near(gt[i], *IMAGE_SIZES[i], 4) for i in range(2)]
    set_class_biases(heads, feature_dict(features), proposals)
    for name, value in heads.state_dict().items():
        golden[f"weights.{our_name(name)}"] = value.clone()
    with torch.no_grad():
        result, _ = heads(feature_dict(features), proposals, IMAGE_SIZES)
    for i, r in enumerate(result):
        print(f"eval image {i}: {len(r['boxes'])} detections, labels {r['labels'].tolist()}")
        put("eval", "batch", **{f"proposals{i}": proposals[i], f"boxes{i}": r["boxes"],
                                f"scores{i}": r["scores"], f"labels{i}": r["labels"],
                                f"mask_probs{i}": r["masks"]})

    heads.train()
    named = dict(heads.named_parameters())
    grad_params = {"fc6": named["box_head.fc6.weight"],
                   "cls_score": named["box_predictor.cls_score.weight"],
                   "mask_fcn1": named["mask_head.0.0.weight"],
                   "mask_fcn_logits": named["mask_predictor.mask_fcn_logits.weight"]}
    gt_masks = [masks_in_boxes(gt[i], *IMAGE_SIZES[i]) for i in range(2)]
    put("targets", "batch", **{f"{name}{i}": t for i in range(2) for name, t in
                               (("gt_boxes", gt[i]), ("gt_labels", gt_labels[i]),
                                ("gt_masks", gt_masks[i]))})
    cases = {"both": (True, True), "one_empty": (True, False), "no_positive": (False, False)}
    for case, has_gt in cases.items():
        targets, case_proposals = [], []
        for i in range(2):
            height, width = IMAGE_SIZES[i]
            if has_gt[i]:
                targets.append({"boxes": gt[i], "labels": gt_labels[i], "masks": gt_masks[i]})
            else:
                targets.append({"boxes": torch.zeros(0, 4),
                                "labels": torch.zeros(0, dtype=torch.int64),
                                "masks": torch.zeros(0, height, width, dtype=torch.uint8)})
            # Without ground truth every candidate is background.
            case_proposals.append(proposals_near(targets[i]["boxes"], height, width, 8))
        leaves = [f.clone().requires_grad_(True) for f in features]
        _, losses = heads(feature_dict(leaves), case_proposals, IMAGE_SIZES, targets)
        total = losses["loss_classifier"] + losses["loss_box_reg"] + losses["loss_mask"]
        grads = torch.autograd.grad(total, list(grad_params.values()) + leaves)
        print(f"train {case}: " + ", ".join(f"{k} {v.item():.6f}" for k, v in losses.items()))
        tensors = {"has_gt": torch.tensor(has_gt), **losses}
        for i in range(2):
            tensors[f"proposals{i}"] = case_proposals[i]
        # fc6's and the features' gradients (the largest tensors) of one case suffice.
        names = list(grad_params) + ["p2", "p3", "p4", "p5"]
        for name, g in zip(names, grads):
            if case == "both" or name in ("cls_score", "mask_fcn1", "mask_fcn_logits"):
                tensors[f"grad_{name}"] = g
        put("train", case, **tensors)

    # project_masks_on_boxes alone: boxes inside, straddling the border, wholly outside, tiny.
    height, width = 40, 50
    mask_boxes = random_boxes(4, height, width, 8.0, 30.0)
    gt_masks = masks_in_boxes(mask_boxes, height, width)
    boxes = torch.cat([mask_boxes + torch.randn(4, 4) * 3,
                       torch.tensor([[-10.0, -5.0, 20.0, 25.0], [40.0, 30.0, 70.0, 55.0],
                                     [-30.0, -30.0, -10.0, -10.0], [10.0, 10.0, 10.5, 10.4]])])
    matched = torch.tensor([0, 1, 2, 3, 1, 3, 0, 2])
    put("mask_targets", "inputs", gt_masks=gt_masks, boxes=boxes, matched=matched)
    for resolution in (28, 7):
        put("mask_targets", f"m{resolution}", resolution=torch.tensor(resolution),
            targets=project_masks_on_boxes(gt_masks, boxes, matched, resolution))

    path = os.path.join(HERE, "roi_heads_golden.pth")
    torch.save(golden, path)
    print(f"wrote {len(golden)} tensors to {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
