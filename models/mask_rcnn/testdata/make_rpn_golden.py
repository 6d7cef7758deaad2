"""Regenerates rpn_golden.pth for sampler_test, anchor_generator_test and rpn_test from
torchvision's own detection modules (the reference, independent of ours): the
BalancedPositiveNegativeSampler's draws after a seed, AnchorGenerator's anchors, and
RegionProposalNetwork (RPNHead, AnchorGenerator, ImageList) proposals, losses and head gradients
on small random pyramids. Needs the project's venv (tools/setup.sh):

    ~/.cache/vision-train/venv/bin/python3 models/mask_rcnn/testdata/make_rpn_golden.py

A plain dict of tensors (torch::pickle_load reads it). Keys are "<op>.<case>.<name>":
  sampler.<case>: seed, batch_size_per_image, positive_fraction (double), labels<i> (int64),
    pos<i>, neg<i> (uint8 masks drawn after torch.manual_seed(seed))
  anchors.<case>: sizes<l>, ratios<l> (double), batch_hw [2], feature_hw<l> [2], cell<l> [A_l, 4],
    anchors [T, 4]
  rpn.<case>: inputs: feature<l> [N, C, H_l, W_l], batch_hw [2], image_sizes [N, 2] (h, w),
    gt<i> [G_i, 4]; the head's weights conv_weight, conv_bias, cls_logits_weight, cls_logits_bias,
    bbox_pred_weight, bbox_pred_bias; options top_n = [pre train, pre test, post train, post
    test], sampling = [batch_size_per_image, positive_fraction] (double), thresholds = [nms,
    score, fg_iou, bg_iou] (double); outputs: eval_proposals<i> (eval mode), train_proposals<i>,
    their scores eval_scores<i>, train_scores<i> (torchvision orders equal scores arbitrarily),
    loss_objectness, loss_rpn_box_reg, grad_<weight name> (train mode, every labelled anchor
    sampled, gradients of the summed losses), and with the default sampling (256 at 0.5) after
    torch.manual_seed(sampled_seed): sampled_loss_objectness, sampled_loss_rpn_box_reg; in
    multiple_of_32, the every-anchor outputs again from the same network and inputs in float64,
    prefixed double_.
"""
import copy
import os
from collections import OrderedDict

import torch
import torchvision
from torchvision.models.detection._utils import BalancedPositiveNegativeSampler
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.rpn import RegionProposalNetwork, RPNHead

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHTS = ["conv_weight", "conv_bias", "cls_logits_weight", "cls_logits_bias", "bbox_pred_weight",
           "bbox_pred_bias"]


def head_params(head):
    conv = head.conv[0][0]
    return dict(zip(WEIGHTS, [conv.weight, conv.bias, head.cls_logits.weight, head.cls_logits.bias,
                              head.bbox_pred.weight, head.bbox_pred.bias]))


def random_boxes(n, height, width, min_size, max_size):
    wh = min_size + torch.rand(n, 2) * (max_size - min_size)
    xy = torch.rand(n, 2) * (torch.tensor([width, height]) - wh)
    return torch.cat([xy, xy + wh], dim=1)


def sampler_cases(put):
    def labels(n, pos, ignored):
        values = torch.zeros(n, dtype=torch.int64)
        perm = torch.randperm(n)
        values[perm[:pos]] = 1
        values[perm[pos:pos + ignored]] = -1
        return values

    cases = {
        "over_quota": (512, 0.25, [labels(1000, 300, 100), labels(50, 2, 5)]),
        "rpn_default": (256, 0.5, [labels(2000, 30, 200), labels(700, 300, 10)]),
        "small": (6, 0.5, [labels(12, 7, 2), labels(9, 0, 3)]),
    }
    for seed, (case, (batch, fraction, image_labels)) in enumerate(cases.items()):
        torch.manual_seed(seed + 100)
        pos, neg = BalancedPositiveNegativeSampler(batch, fraction)(image_labels)
        put("sampler", case, seed=torch.tensor(seed + 100),
            batch_size_per_image=torch.tensor(batch),
            positive_fraction=torch.tensor(fraction, dtype=torch.float64))
        for i, (lab, p, n) in enumerate(zip(image_labels, pos, neg)):
            put("sampler", case, **{f"labels{i}": lab, f"pos{i}": p, f"neg{i}": n})


def anchor_cases(put):
    cases = {
        # Two levels of odd sizes, several sizes per level (one with half-pixel corners, 33),
        # per-level ratios.
        "two_levels_odd": (((16, 33), (50,)), ((0.5, 1.0, 2.0), (0.7, 1.3)), (37, 51),
                           [(9, 13), (5, 7)]),
        # Mask R-CNN's FPN anchors on a batch that is no multiple of 32: strides differ per axis.
        "fpn_non_multiple": (((32,), (64,), (128,), (256,), (512,)), ((0.5, 1.0, 2.0),) * 5,
                             (50, 70), [(13, 18), (7, 9), (4, 5), (2, 3), (1, 2)]),
    }
    for case, (sizes, ratios, batch_hw, feature_hw) in cases.items():
        generator = AnchorGenerator(sizes, ratios)
        features = [torch.zeros(1, 1, h, w) for h, w in feature_hw]
        images = ImageList(torch.zeros(1, 3, *batch_hw), [batch_hw])
        anchors = generator(images, features)[0]
        put("anchors", case, batch_hw=torch.tensor(batch_hw), anchors=anchors)
        for level, (s, r, hw) in enumerate(zip(sizes, ratios, feature_hw)):
            put("anchors", case, **{f"sizes{level}": torch.tensor(s, dtype=torch.float64),
                                    f"ratios{level}": torch.tensor(r, dtype=torch.float64),
                                    f"feature_hw{level}": torch.tensor(hw),
                                    f"cell{level}": generator.cell_anchors[level]})


def rpn_case(put, case, channels, batch_hw, image_sizes, feature_hw, gt_boxes, top_n, nms, score,
             with_double):
    pre_train, pre_test, post_train, post_test = top_n
    anchor_generator = AnchorGenerator(((32,), (64,), (128,), (256,), (512,)),
                                       ((0.5, 1.0, 2.0),) * 5)
    head = RPNHead(channels, 3)
    # Larger than the N(0, 0.01) initialisation, so scores and deltas spread (no near-ties).
    with torch.no_grad():
        for name, p in head_params(head).items():
            p.normal_(0, {"conv_weight": 0.1, "cls_logits_weight": 0.3}.get(name, 0.1))

    def make_rpn(batch_size_per_image, positive_fraction):
        return RegionProposalNetwork(
            anchor_generator, head, 0.7, 0.3, batch_size_per_image, positive_fraction,
            dict(training=pre_train, testing=pre_test),
            dict(training=post_train, testing=post_test),
            nms, score_thresh=score)

    features = OrderedDict((str(l), torch.randn(len(image_sizes), channels, h, w))
                           for l, (h, w) in enumerate(feature_hw))
    images = ImageList(torch.zeros(len(image_sizes), 3, *batch_hw), image_sizes)
    targets = [dict(boxes=b) for b in gt_boxes]
    total_anchors = sum(h * w * 3 for h, w in feature_hw) * len(image_sizes)
    every = 4 * total_anchors  # more than the anchors: every labelled anchor is sampled

    def every_anchor_run(head):
        """Eval and train proposals with their scores (forward drops them; they tell which
        proposals tie), losses with every labelled anchor sampled, gradients of their sum."""
        dtype = head.cls_logits.weight.dtype
        rpn = RegionProposalNetwork(
            anchor_generator, head, 0.7, 0.3, every, 0.5,
            dict(training=pre_train, testing=pre_test),
            dict(training=post_train, testing=post_test),
            nms, score_thresh=score).eval()
        filter_proposals = rpn.filter_proposals
        scores = []

        def filter_and_keep_scores(*args):
            boxes, image_scores = filter_proposals(*args)
            scores.append([s.detach() for s in image_scores])
            return boxes, image_scores

        rpn.filter_proposals = filter_and_keep_scores
        typed = OrderedDict((k, f.to(dtype)) for k, f in features.items())
        with torch.no_grad():
            eval_boxes, eval_losses = rpn(images, typed)
        assert not eval_losses
        rpn.train()
        train_boxes, losses = rpn(images, typed, [dict(boxes=b.to(dtype)) for b in gt_boxes])
        head.zero_grad()
        (losses["loss_objectness"] + losses["loss_rpn_box_reg"]).backward()
        out = {name: value.detach() for name, value in losses.items()}
        for name, p in head_params(head).items():
            out[f"grad_{name}"] = p.grad.clone()
        for i in range(len(image_sizes)):
            out[f"eval_proposals{i}"] = eval_boxes[i]
            out[f"eval_scores{i}"] = scores[0][i]
            out[f"train_proposals{i}"] = train_boxes[i].detach()
            out[f"train_scores{i}"] = scores[1][i]
        return out

    double_head = copy.deepcopy(head).double()
    put("rpn", case, **every_anchor_run(head))
    if with_double:
        # The same network and inputs in float64 (the model's parity test runs in double). Its
        # loss_objectness is float32: torchvision's labels are float32 and
        # binary_cross_entropy_with_logits keeps the target's dtype.
        put("rpn", case, **{f"double_{k}": v for k, v in every_anchor_run(double_head).items()})
    sampled_seed = 7
    torch.manual_seed(sampled_seed)
    _, sampled_losses = make_rpn(256, 0.5).train()(images, features, targets)

    put("rpn", case, batch_hw=torch.tensor(batch_hw), image_sizes=torch.tensor(image_sizes),
        top_n=torch.tensor(top_n), sampling=torch.tensor([every, 0.5], dtype=torch.float64),
        thresholds=torch.tensor([nms, score, 0.7, 0.3], dtype=torch.float64),
        sampled_seed=torch.tensor(sampled_seed),
        sampled_loss_objectness=sampled_losses["loss_objectness"].detach(),
        sampled_loss_rpn_box_reg=sampled_losses["loss_rpn_box_reg"].detach())
    for name, p in head_params(head).items():
        put("rpn", case, **{name: p.detach().clone()})
    for l, f in enumerate(features.values()):
        put("rpn", case, **{f"feature{l}": f})
    for i in range(len(image_sizes)):
        put("rpn", case, **{f"gt{i}": gt_boxes[i]})


def main():
    # The pins of tools/python_requirements.txt: other versions may draw other random inputs.
    if not (torch.__version__.startswith("2.11.") and torchvision.__version__.startswith("0.26.")):
        raise SystemExit(f"needs torch 2.11 and torchvision 0.26, found {torch.__version__} and "
                         f"{torchvision.__version__}")
    torch.manual_seed(2017)
    golden = {}

    def put(op, case, **tensors):
        for name, value in tensors.items():
            golden[f"{op}.{case}.{name}"] = value

    sampler_cases(put)
    anchor_cases(put)
    # A batch padded to a multiple of 32 with two image sizes; the second image has no ground
    # truth (all its anchors are negatives). Default test top-n; small training top-n.
    rpn_case(put, "multiple_of_32", 8, (96, 128), [(96, 128), (80, 101)],
             [(24, 32), (12, 16), (6, 8), (3, 4), (2, 2)],
             [random_boxes(3, 96, 128, 8, 60), torch.zeros(0, 4)], (300, 1000, 200, 1000), 0.7, 0.0,
             with_double=True)
    # A batch that is no multiple of 32 (strides 4x3, 7x7, ...), a score threshold, small top-n,
    # a tiny ground-truth box among larger ones.
    gt1 = torch.cat([random_boxes(3, 77, 121, 10, 70), torch.tensor([[40.0, 30.0, 43.0, 32.5]])])
    rpn_case(put, "non_multiple", 8, (100, 130), [(100, 130), (77, 121)],
             [(25, 33), (13, 17), (7, 9), (4, 5), (2, 3)],
             [random_boxes(2, 100, 130, 20, 90), gt1], (150, 200, 100, 120), 0.6, 0.4,
             with_double=False)
    torch.save(golden, os.path.join(HERE, "rpn_golden.pth"))


if __name__ == "__main__":
    main()
