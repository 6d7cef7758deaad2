"""The Python side of models/mask_rcnn/trajectory_test.sh: torchvision's detection training loop
(pytorch/vision references/detection, train.py + engine.py, "[TV]" in models/mask_rcnn/RECIPE.md)
around torchvision 0.26's own MaskRCNN, run from our trainer's initial weights on the same
batches with the same random draws, and compared with the trainer's run step by step.

  make_data --out DIR
      writes a tiny COCO-layout dataset (PNG, so that OpenCV decodes the same pixels on both
      sides): 4 training images (160x120, 150x100, 136x100, 176x128) and 1 validation image with
      2 or 3 polygon objects each (ellipses, triangles, rectangles of categories 1-3, each its
      own colour) on blurred noise, one of them cut by the image's right border, and a crowd
      region (RLE) in the last training image; the JSON lists 80 categories, the recipe's
      num_classes.
  compare --common DIR --data DIR --inputs INPUTS_DIR --run RUN_DIR --chunks N --base_lr LR
          --steps K --warmup_steps W --milestones M1,M2 --size S [widths] [tolerances]
      INPUTS_DIR holds what //models/mask_rcnn:trajectory_inputs wrote: checkpoint_0.pt (our
      initial weights, and the default generator's state our first step starts from) and
      batch.pt (the 4 training samples as our loader makes them: pixels, sizes, instance
      targets). First the inputs are checked against torchvision's own input path (pixels and
      sizes through GeneralizedRCNNTransform, boxes; mask pixels are counted, not checked).
      Then two comparisons with RUN_DIR (metrics.jsonl and checkpoint_<k>.pt for every step k):
        stepwise: reference step k starts from our weights after step k - 1 (its momentum its
          own) and, on rank 0, from the generator state our checkpoint k - 1 saved: the
          generator state after the step must equal our checkpoint k's (the samplers drew the
          same number of times), then lr and the options of every parameter group, the five
          losses and their sum, the gradient norm, each tensor's update, and the frozen tensors
          (stem, layer1, every FrozenBatchNorm2d) unchanged, at every step;
        free running: the reference's own K steps from the initial weights and generator state
          against ours (losses, gradient norm, all weights), bounded by a noise floor: a second
          reference run from initial weights moved by one float32 rounding.

The reference, as [TV] reads (models/mask_rcnn/RECIPE.md, M1-M14):
  - optimizer: torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr,
    momentum=0.9, weight_decay=1e-4): one group, biases decayed, FrozenBatchNorm2d has no
    parameters (train.py, --norm-weight-decay unset); no clipping, float32 (no --amp);
  - schedule: MultiStepLR(milestones, gamma=0.1) built first (train.py) and LinearLR(
    start_factor=1/1000, total_iters=W) on the same optimizer (engine.py train_one_epoch's
    warmup), each stepped after every optimizer step: the warmup is per iteration as in [TV]'s
    first epoch, and MultiStepLR per iteration because an epoch of this data is one iteration
    (the recipe's milestones are in iterations, RECIPE.md M7). lr = base x global batch / 16 is
    the test's --base_lr (M2, our linear scaling rule);
  - loss: the sum of the five losses of the model's dict (engine.py), backward, step. With N
    ranks (DDP) each rank computes its losses on its share of the batch and the gradients are
    averaged: here each rank's sum / N is backpropagated into the same .grad;
  - the model: torchvision.models.detection.MaskRCNN with its defaults (anchors 32-512 x
    {0.5, 1, 2}, RPN and RoI sampling, NMS, thresholds; [TVM] faster_rcnn.py) on a ResNet
    (resnet18 here, the test's substitute for resnet50, with FrozenBatchNorm2d) through
    backbone_utils._resnet_fpn_extractor(body, trainable_layers=3) (layer2-4 train) and
    BackboneWithFPN with LastLevelMaxPool; the widths the test sets (FPN channels, TwoMLPHead's
    representation size, MaskRCNNHeads' layers, MaskRCNNPredictor as wide as its input);
  - random draws: the samplers (BalancedPositiveNegativeSampler, one randperm of the positives
    then one of the negatives per image, RPN then RoI heads) draw from the default generator;
    each emulated rank has its own generator state, all starting from checkpoint_0's (every
    rank of the trainer seeds torch with the config's seed and builds the same model).
    GeneralizedRCNNTransform is bypassed (images enter normalised, resized and padded, as they
    leave our data pipeline): in training it would draw one number per image
    (torch_choice(min_size)) before the samplers; that draw is probed at step 1 to show that the
    replay matters.
Float32 throughout, on the CPU, one thread; the backbone and the mask head channels-last, as
ours runs them on the CPU (only the memory format: in NCHW the convolutions round otherwise and
near-ties among the RPN's scores flip now and then, --memory_format=nchw).
"""
import argparse
import json
import math
import os
import re
import sys

import cv2
import numpy as np
import torch

NUM_CATEGORIES = 80
# (width, height) of the 4 training images and the validation image, in file order: all of
# aspect ratios in [1.33, 1.5], one bin of an aspect-ratio grouping (the images' order in
# batches does not depend on it), and of 4 widths after Resize (128, 144, 130, 132 at 96).
TRAIN_SIZES = [(160, 120), (150, 100), (136, 100), (176, 128)]
VAL_SIZES = [(160, 120)]
COLOURS = {1: (40, 40, 200), 2: (40, 180, 40), 3: (200, 60, 30)}  # BGR per category id


def shape_polygon(kind, cx, cy, w, h, angle):
    """Vertices of an ellipse (kind 1), a triangle (2) or a rectangle (3), rotated."""
    if kind == 1:
        t = np.linspace(0, 2 * np.pi, 24, endpoint=False)
        points = np.stack([0.5 * w * np.cos(t), 0.5 * h * np.sin(t)], 1)
    elif kind == 2:
        points = np.array([[-0.5 * w, 0.5 * h], [0.0, -0.5 * h], [0.5 * w, 0.5 * h]])
    else:
        points = np.array([[-0.5 * w, -0.5 * h], [0.5 * w, -0.5 * h], [0.5 * w, 0.5 * h],
                           [-0.5 * w, 0.5 * h]])
    a = np.deg2rad(angle)
    rotation = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return points @ rotation.T + np.array([cx, cy])


def make_data(out):
    rng = np.random.default_rng(2026)
    categories = [{"id": i, "name": "class%d" % i, "supercategory": "shape"}
                  for i in range(1, NUM_CATEGORIES + 1)]
    annotation_id = 1
    for split, sizes, first_id in [("train2017", TRAIN_SIZES, 1), ("val2017", VAL_SIZES, 100)]:
        os.makedirs(os.path.join(out, split), exist_ok=True)
        images, annotations = [], []
        for i, (w, h) in enumerate(sizes):
            image_id = first_id + i
            image = rng.integers(90, 200, size=(h, w, 3), dtype=np.uint8)
            image = cv2.GaussianBlur(image, (5, 5), 0)
            count = 3 if i % 2 == 0 else 2
            for k in range(count):
                kind = 1 + (i + k) % 3
                ow, oh = (int(v) for v in rng.integers(26, 56, size=2))
                cx = float(rng.uniform(0.5 * ow + 6, w - 0.5 * ow - 6))
                cy = float(rng.uniform(0.5 * oh + 6, h - 0.5 * oh - 6))
                polygon = shape_polygon(kind, cx, cy, ow, oh, float(rng.uniform(-20, 20)))
                # The last object of the third image is cut by the right border (its mask reaches
                # the last column, next to PadToDivisor's padding after Resize); the others keep
                # 2 pixels away. Vertices at 1/8 pixel: the box (their bounds) is exact in binary,
                # so that x + width is the bounds on both sides (see RECIPE.md, Trajectory test).
                right = w if (i == 2 and k == count - 1) else w - 3
                if right == w:
                    polygon[:, 0] += w - polygon[:, 0].max() + 8
                polygon = np.round(np.clip(polygon, 2, [right, h - 3]) * 8) / 8
                cv2.fillPoly(image, [np.rint(polygon).astype(np.int32)],
                             [int(c) + int(rng.integers(-20, 20)) for c in COLOURS[kind]])
                x0, y0 = polygon.min(0)
                x1, y1 = polygon.max(0)
                annotations.append({
                    "id": annotation_id, "image_id": image_id, "category_id": kind, "iscrowd": 0,
                    "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                    "area": float(cv2.contourArea(polygon.astype(np.float32))),
                    "segmentation": [[float(v) for v in polygon.reshape(-1)]],
                })
                annotation_id += 1
            if split == "train2017" and i == len(sizes) - 1:
                # A crowd region (uncompressed RLE, column-major runs from a 0 run): [TV] drops
                # it from the targets (ConvertCocoPolysToMask), and so does our target generator.
                crowd = np.zeros((h, w), dtype=np.uint8)
                crowd[h - 30:h - 6, w - 40:w - 8] = 1
                flat = crowd.flatten(order="F")
                edges = np.flatnonzero(np.diff(flat)) + 1
                counts = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
                annotations.append({
                    "id": annotation_id, "image_id": image_id, "category_id": 2, "iscrowd": 1,
                    "bbox": [float(w - 40), float(h - 30), 32.0, 24.0], "area": 768.0,
                    "segmentation": {"size": [h, w], "counts": counts},
                })
                annotation_id += 1
            name = "%012d.png" % image_id
            cv2.imwrite(os.path.join(out, split, name), image)
            images.append({"id": image_id, "file_name": name, "width": w, "height": h})
        os.makedirs(os.path.join(out, "annotations"), exist_ok=True)
        with open(os.path.join(out, "annotations", "instances_%s.json" % split), "w") as f:
            json.dump({"images": images, "annotations": annotations,
                       "categories": categories}, f)


# ----------------------------------------------------------------------------- model

MOMENTUM, WEIGHT_DECAY, WARMUP_FACTOR, GAMMA, TRAINABLE_LAYERS = 0.9, 1e-4, 1.0 / 1000, 0.1, 3
LOSSES = ["loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg", "loss_mask"]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def build_model(args):
    """torchvision's MaskRCNN at the test's sizes (see the module's docstring)."""
    from torchvision.models import resnet
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import BackboneWithFPN, _resnet_fpn_extractor
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.ops import misc as misc_nn_ops
    from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

    body = getattr(resnet, args.backbone)(weights=None, norm_layer=misc_nn_ops.FrozenBatchNorm2d)
    # [TVM] maskrcnn_resnet50_fpn: _resnet_fpn_extractor with trainable layers 3 freezes conv1
    # and layer1; its FPN (256 channels) is replaced by one of the test's width, built as it
    # builds its own.
    _resnet_fpn_extractor(body, TRAINABLE_LAYERS)
    stage2 = body.inplanes // 8
    backbone = BackboneWithFPN(body, {"layer%d" % k: str(k - 1) for k in range(1, 5)},
                               [stage2 * 2 ** (k - 1) for k in range(1, 5)], args.fpn_channels,
                               extra_blocks=LastLevelMaxPool())
    channels = args.fpn_channels
    mask_layers = [int(c) for c in args.mask_head_channels.split(",")]
    classes = args.num_classes + 1  # the background
    return MaskRCNN(
        backbone, num_classes=None,
        box_head=TwoMLPHead(channels * 7 * 7, args.representation_size),
        box_predictor=FastRCNNPredictor(args.representation_size, classes),
        mask_head=MaskRCNNHeads(channels, mask_layers, 1),
        mask_predictor=MaskRCNNPredictor(mask_layers[-1], mask_layers[-1], classes))


def torchvision_name(native):
    """This project's Mask R-CNN key -> torchvision's (tools/export layout "torchvision",
    ToTorchvisionMaskRcnnKey; the inverse of mask_rcnn.cc's FromTorchvisionKey)."""
    for pattern, replacement in [
            (r"^backbone\.fpn\.lateral(\d+)\.", r"backbone.fpn.inner_blocks.\1.0."),
            (r"^backbone\.fpn\.smooth(\d+)\.", r"backbone.fpn.layer_blocks.\1.0."),
            (r"^rpn\.head\.conv\.", "rpn.head.conv.0.0.")]:
        if re.match(pattern, native):
            return re.sub(pattern, replacement, native)
    m = re.match(r"^roi_heads\.mask_head\.mask_fcn(\d+)\.(.*)$", native)
    if m:
        return "roi_heads.mask_head.%d.0.%s" % (int(m.group(1)) - 1, m.group(2))
    return native


# ----------------------------------------------------------------------------- inputs

def load_our_batch(common, path):
    """Our 4 samples: images [4, 3, H, W], image_sizes, collated_sizes [4, 2] and per image the
    instance targets (labels as the model sees them: + 1, 0 being the background)."""
    archive = common.load_archive(path)
    batch = {"images": common.archive_tensor(archive, "images").float().contiguous(),
             "image_sizes": common.archive_tensor(archive, "image_sizes").long(),
             "collated_sizes": common.archive_tensor(archive, "collated_sizes").long()}
    targets = []
    for i in range(batch["images"].shape[0]):
        get = lambda name: common.archive_tensor(archive, "instances_%d_%s" % (i, name))
        targets.append({"boxes": get("boxes").float(), "labels": get("labels").long() + 1,
                        "masks": get("masks"), "is_crowd": get("is_crowd")})
    batch["targets"] = targets
    return batch


def rank_batches(common, batch, world):
    """Each rank's first batch as the trainer's loader collates it: rows r, r + N, ... of the
    global batch, padded to the largest collated size among them (the 4-image batch is padded
    further with zeros, which the crop removes), and torchvision's targets: masks at the image's
    size ([TV]'s are the resized image's; our target generator rasterises at the padded size and
    MaskRCNN::Losses crops), crowd objects dropped (ConvertCocoPolysToMask keeps iscrowd == 0)."""
    ranks = []
    for rows in common.rank_rows(batch["images"].shape[0], world):
        height = int(batch["collated_sizes"][rows, 0].max())
        width = int(batch["collated_sizes"][rows, 1].max())
        images = batch["images"][rows, :, :height, :width].contiguous()
        sizes = [tuple(int(v) for v in batch["image_sizes"][i]) for i in rows]
        targets = []
        for i in rows:
            t = batch["targets"][i]
            keep = t["is_crowd"] == 0
            h, w = sizes[len(targets)]
            targets.append({"boxes": t["boxes"][keep], "labels": t["labels"][keep],
                            "masks": t["masks"][keep][:, :h, :w].contiguous()})
        ranks.append({"rows": rows, "images": images, "sizes": sizes, "targets": targets})
    return ranks


def compare_inputs(batch, data_dir, size, checker):
    """Our pixels, sizes and boxes against torchvision's input path on the files
    (cv2.imread -> RGB in [0, 1], ConvertCocoPolysToMask, GeneralizedRCNNTransform with
    min_size = size, max_size 1333: normalise, resize bilinearly, pad to 32); mask pixels
    (pycocotools' polygon rasterisation resized nearest, against ours) are counted."""
    from pycocotools import mask as coco_mask
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    transform = GeneralizedRCNNTransform(size, 1333, MEAN, STD).eval()
    with open(os.path.join(data_dir, "annotations", "instances_train2017.json")) as f:
        coco = json.load(f)
    images = sorted(coco["images"], key=lambda image: image["id"])
    worst_pixel, worst_box, mask_differ, mask_total = 0.0, 0.0, 0, 0
    for i, info in enumerate(images):
        bgr = cv2.imread(os.path.join(data_dir, "train2017", info["file_name"]), cv2.IMREAD_COLOR)
        rgb = torch.from_numpy(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)).permute(2, 0, 1).float() / 255
        h, w = info["height"], info["width"]
        # ConvertCocoPolysToMask: crowd regions are no targets.
        annotations = [a for a in coco["annotations"]
                       if a["image_id"] == info["id"] and a["iscrowd"] == 0]
        boxes = torch.tensor([a["bbox"] for a in annotations], dtype=torch.float32)
        boxes[:, 2:] += boxes[:, :2]
        boxes[:, 0::2].clamp_(min=0, max=w)
        boxes[:, 1::2].clamp_(min=0, max=h)
        masks = []
        for a in annotations:
            decoded = coco_mask.decode(coco_mask.frPyObjects(a["segmentation"], h, w))
            masks.append(torch.as_tensor(decoded.reshape(h, w, -1), dtype=torch.uint8).any(dim=2))
        target = {"boxes": boxes, "labels": torch.tensor([a["category_id"] for a in annotations]),
                  "masks": torch.stack(masks).to(torch.uint8)}
        with torch.no_grad():
            image_list, (resized,) = transform([rgb], [target])
        theirs_size = tuple(image_list.image_sizes[0])
        ours_size = tuple(int(v) for v in batch["image_sizes"][i])
        if theirs_size != ours_size:
            checker.fail("inputs: image %d is %s in our batch, %s after torchvision's transform"
                         % (i, ours_size, theirs_size))
            continue
        hh, ww = ours_size
        ours_image = batch["images"][i]
        worst_pixel = max(worst_pixel, (ours_image[:, :hh, :ww] -
                                        image_list.tensors[0, :, :hh, :ww]).abs().max().item())
        outside = torch.ones_like(ours_image, dtype=torch.bool)
        outside[:, :hh, :ww] = False
        if ours_image[outside].abs().sum().item() != 0:
            checker.fail("inputs: image %d is not padded with 0 beyond its %dx%d pixels"
                         % (i, hh, ww))
        ours_t = {k: v[batch["targets"][i]["is_crowd"] == 0]
                  for k, v in batch["targets"][i].items()}
        if ours_t["boxes"].shape != resized["boxes"].shape or not torch.equal(
                ours_t["labels"], resized["labels"]):
            checker.fail("inputs: image %d has objects %s in our batch, %s in torchvision's"
                         % (i, ours_t["labels"].tolist(), resized["labels"].tolist()))
            continue
        worst_box = max(worst_box, (ours_t["boxes"] - resized["boxes"]).abs().max().item())
        theirs_masks = resized["masks"].bool()
        ours_masks = ours_t["masks"][:, :hh, :ww].bool()
        mask_differ += int((theirs_masks != ours_masks).sum())
        mask_total += int(theirs_masks.sum())
    print("inputs: pixels max |ours - torchvision's transform| = %.3g; boxes max |ours - "
          "torchvision's| = %.3g px; masks: %d pixels differ from pycocotools' polygons resized "
          "nearest (of %d object pixels)" % (worst_pixel, worst_box, mask_differ, mask_total))
    # OpenCV's bilinear resize (ours) and torch's interpolate round differently: 3.5e-5 seen.
    if not worst_pixel <= 1e-4:
        checker.fail("inputs: our pixels differ from torchvision's GeneralizedRCNNTransform by up "
                     "to %g (expected <= 1e-4)" % worst_pixel)
    if not worst_box <= 1e-3:
        checker.fail("inputs: our boxes differ from torchvision's resized boxes by up to %g px "
                     "(expected <= 1e-3)" % worst_box)


# ----------------------------------------------------------------------------- reference

class Reference:
    """[TV]'s training loop on fixed per-rank batches: SGD over the trainable parameters,
    MultiStepLR and the LinearLR warmup stepped after every step, each rank's summed losses / N
    backpropagated (DDP's averaged gradients), each rank drawing from its own generator state."""

    def __init__(self, args, state, ranks, rng):
        from torch.optim.lr_scheduler import LinearLR, MultiStepLR
        self.model = build_model(args)
        self.model.load_state_dict(state, strict=True)
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.SGD(self.params, lr=args.base_lr, momentum=MOMENTUM,
                                         weight_decay=args.weight_decay)
        milestones = [int(m) for m in args.milestones.split(",")]
        self.schedulers = [MultiStepLR(self.optimizer, milestones=milestones, gamma=GAMMA)]
        if args.warmup_steps > 0:
            self.schedulers.append(LinearLR(self.optimizer, start_factor=args.warmup_factor,
                                            total_iters=args.warmup_steps))
        self.ranks = ranks
        self.rng = [rng.clone() for _ in ranks]
        self.channels_last = args.memory_format == "channels_last"
        if self.channels_last:
            # Our mask head's convolutions run channels-last on the CPU too (roi_heads.cc).
            self.model.roi_heads.mask_head.register_forward_pre_hook(
                lambda module, inputs: (inputs[0].contiguous(memory_format=torch.channels_last),))

    def losses(self, rank):
        """The rank's loss dict, drawing from (and advancing) the rank's generator state."""
        from torchvision.models.detection.image_list import ImageList
        batch = self.ranks[rank]
        torch.set_rng_state(self.rng[rank])
        images = ImageList(batch["images"], batch["sizes"])
        # Our backbone runs channels-last on the CPU (mask_rcnn.cc, Pyramid): the same memory
        # format rounds alike (see --memory_format).
        features = self.model.backbone(images.tensors.contiguous(
            memory_format=torch.channels_last) if self.channels_last else images.tensors)
        proposals, rpn_losses = self.model.rpn(images, features, batch["targets"])
        _, roi_losses = self.model.roi_heads(features, proposals, images.image_sizes,
                                             batch["targets"])
        self.rng[rank] = torch.get_rng_state()
        return {**rpn_losses, **roi_losses}

    def step(self, state=None, rng0=None):
        """One optimizer step from `state` (copied in place: the momentum stays) or from where
        the last ended, rank 0 drawing from `rng0` if given. Returns the step's values, the
        state after it and each rank's generator state after it."""
        if state is not None:
            self.model.load_state_dict(state, strict=True)
        if rng0 is not None:
            self.rng[0] = rng0.clone()
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.zero_grad()
        world = len(self.ranks)
        terms = {name: 0.0 for name in LOSSES}
        for rank in range(world):
            losses = self.losses(rank)
            if sorted(losses) != sorted(LOSSES):
                raise SystemExit("FAIL: torchvision's MaskRCNN returned losses %s" % sorted(losses))
            (sum(losses.values()) / world).backward()
            for name, value in losses.items():
                terms[name] += value.item() / world
        terms["loss"] = sum(terms[name] for name in LOSSES)
        grad_norm = math.sqrt(sum(p.grad.double().pow(2).sum().item()
                                  for p in self.params if p.grad is not None))
        self.optimizer.step()
        for scheduler in self.schedulers:
            scheduler.step()
        terms.update(lr=lr, grad_norm=grad_norm)
        after = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return terms, after, [r.clone() for r in self.rng]


# ----------------------------------------------------------------------------- comparison

def compare(args, common):
    torch.set_num_threads(1)
    world = args.chunks
    checker = common.Checker()
    batch = load_our_batch(common, os.path.join(args.inputs, "batch.pt"))
    compare_inputs(batch, args.data, args.size, checker)
    ranks = rank_batches(common, batch, world)
    print("reference: %d images, %d ranks of %d (rank batches %s); %s objects" % (
        batch["images"].shape[0], world, batch["images"].shape[0] // world,
        ", ".join("%dx%d" % tuple(r["images"].shape[2:]) for r in ranks),
        [len(t["labels"]) for r in ranks for t in r["targets"]]))

    archive0, initial = common.checkpoint_tensors(os.path.join(args.inputs, "checkpoint_0.pt"),
                                                  torchvision_name)
    initial_rng = common.rng_state(archive0)
    model = build_model(args)
    names = sorted(model.state_dict())
    if sorted(initial) != names:
        sys.exit("FAIL: parameter names differ between our checkpoint (in torchvision's layout) "
                 "and torchvision's MaskRCNN: %s" % sorted(set(initial) ^ set(names)))
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    frozen = [n for n in names if n not in trainable]
    del model
    ours_by_step = common.read_metrics(args.run, args.steps)

    # 1. Step by step: every reference step starts from our weights after the previous step
    # (its momentum its own) and, on rank 0, from the generator state our checkpoint saved.
    reference = Reference(args, initial, ranks, initial_rng)
    before, before_rng = initial, initial_rng
    same_draws = 0
    for step in range(1, args.steps + 1):
        ref, after, rngs = reference.step(before, before_rng)
        ours = ours_by_step[step]
        archive, ours_after = common.checkpoint_tensors(
            os.path.join(args.run, "checkpoint_%d.pt" % step), torchvision_name)
        ours_rng = common.rng_state(archive)
        if torch.equal(rngs[0], ours_rng):
            same_draws += 1
        else:
            checker.fail("step %d: rank 0's generator state after the step differs from ours: "
                         "the samplers drew another number of times" % step)
        checker.check("stepwise", "lr", step, common.relative(ours["lr"], ref["lr"]),
                      args.lr_rtol, "the logged lr")
        groups = common.optimizer_groups(archive)
        if sum(g["params"] for g in groups) != len(trainable):
            checker.fail("step %d: our parameter groups hold %d tensors, torchvision trains %d"
                         % (step, sum(g["params"] for g in groups), len(trainable)))
        for i, g in enumerate(groups):
            checker.check("stepwise", "lr", step, common.relative(g["lr"], ref["lr"]),
                          args.lr_rtol, "group %d of %d tensors" % (i, g["params"]))
            seen = (g.get("weight_decay"), g.get("momentum"), g.get("dampening"), g.get("nesterov"))
            if seen != (args.weight_decay, MOMENTUM, 0.0, False):
                checker.fail("step %d: our parameter group %d has weight decay, momentum, "
                             "dampening, nesterov %s; [TV]'s SGD %s" % (
                                 step, i, seen, (args.weight_decay, MOMENTUM, 0.0, False)))
        for name in LOSSES + ["loss"]:
            checker.check("stepwise", name, step, common.relative(ours[name], ref[name]),
                          args.stepwise_rtol, "expected %.9g, saw %.9g" % (ref[name], ours[name]))
        checker.check("stepwise", "grad_norm", step,
                      common.relative(ours["grad_norm"], ref["grad_norm"]), args.grad_rtol,
                      "expected %.9g, saw %.9g" % (ref["grad_norm"], ours["grad_norm"]))
        total_d, each = common.update_differences(before, ours_after, after, trainable)
        checker.check("stepwise", "update", step, total_d, args.update_rtol, "all parameters")
        worst_update = max((d, n) for n, d in each.items())
        for name, d in each.items():
            checker.check("stepwise", "updates", step, d, args.tensor_update_rtol, name)
        changed = [n for n in frozen if not torch.equal(ours_after[n], initial[n])]
        if changed:
            checker.fail("step %d: tensors torchvision keeps frozen changed in ours: %s"
                         % (step, changed[:8]))
        print("step %2d lr %.6e loss %.7f (ours %.7f) grad_norm %.6f (ours %.6f) update %.2e (%s)"
              % (step, ref["lr"], ref["loss"], ours["loss"], ref["grad_norm"], ours["grad_norm"],
                 worst_update[0], worst_update[1]), flush=True)
        if step == 1:
            first_step = (ref, after)
        before, before_rng = ours_after, ours_rng
    print("sampler draws: rank 0's generator state after the step equals ours at %d of %d steps"
          % (same_draws, args.steps))

    # The replay matters: step 1 from the generator state torchvision's training transform
    # would leave (GeneralizedRCNNTransform.torch_choice draws one uniform per image before the
    # samplers) moves the update by far more than ours differs from the replayed step.
    drawn = Reference(args, initial, ranks, initial_rng)
    for rank, r in enumerate(ranks):
        torch.set_rng_state(initial_rng)
        for _ in r["rows"]:
            torch.empty(1).uniform_(0.0, 1.0)
        drawn.rng[rank] = torch.get_rng_state()
    drawn_values, drawn_after, _ = drawn.step()
    del drawn
    replayed_values, replayed_after = first_step
    probe_update, _ = common.update_differences(initial, drawn_after, replayed_after, trainable)
    probe_losses = max(common.relative(drawn_values[n], replayed_values[n]) for n in LOSSES)
    print("step 1 from the generator state after the transform's draws, against replayed: "
          "update %.3g, losses %.3g, gradient norm %.3g (relative)" % (
              probe_update, probe_losses,
              common.relative(drawn_values["grad_norm"], replayed_values["grad_norm"])))
    if not probe_update > 10 * args.update_rtol:
        checker.fail("the samplers' draws do not matter on this data: step 1's update moves by "
                     "%.3g (not more than 10 x the update tolerance) when the generator is "
                     "advanced, so the replay is not tested" % probe_update)

    # 2. Free running: the reference's own trajectory from the initial weights and generator
    # state, against ours, bounded by the noise floor: a second reference run from initial
    # weights moved by one float32 rounding (relative 2^-24), drawing from the same states.
    if args.free:
        def free_run(state):
            run = Reference(args, state, ranks, initial_rng)
            return [run.step() for _ in range(args.steps)]

        free = free_run(initial)
        floor = free_run(common.perturb(initial, torch.Generator().manual_seed(0)))
        for step in range(1, args.steps + 1):
            ref, ref_after, _ = free[step - 1]
            noise, noise_after, _ = floor[step - 1]
            _, ours_after = common.checkpoint_tensors(
                os.path.join(args.run, "checkpoint_%d.pt" % step), torchvision_name)
            for name in LOSSES + ["loss", "grad_norm"]:
                checker.check("free", name, step,
                              common.relative(ours_by_step[step][name], ref[name]), float("inf"))
                checker.check("floor", name, step, common.relative(noise[name], ref[name]),
                              float("inf"))
            for mode, states in [("free", ours_after), ("floor", noise_after)]:
                d = max((common.tensor_relative(states[n], ref_after[n]), n) for n in trainable)
                checker.check(mode, "weights", step, d[0], float("inf"), d[1])
        checker.within_floor(LOSSES + ["loss", "grad_norm", "weights"], args.free_factor,
                             args.floor_min)
        print("first and last step of the reference: loss %.5f -> %.5f, lr %.4g -> %.4g"
              % (free[0][0]["loss"], free[-1][0]["loss"], free[0][0]["lr"], free[-1][0]["lr"]))

    checker.report(args.steps, ["stepwise", "free", "floor"],
                   ["lr"] + LOSSES + ["loss", "grad_norm", "update", "updates", "weights"])
    return checker.finish(args.steps, world)


def import_common(argv):
    """models/testing/trajectory_common.py, from the directory --common names (it is no package:
    the test passes the directory, as it passes the peers' to the other references)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--common="):
            sys.path.insert(0, arg.split("=", 1)[1])
        elif arg == "--common" and i + 1 < len(argv):
            sys.path.insert(0, argv[i + 1])
    import trajectory_common  # noqa: E402
    return trajectory_common


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make_data")
    make.add_argument("--out", required=True)
    if len(sys.argv) > 1 and sys.argv[1] == "make_data":
        args = parser.parse_args()
        make_data(args.out)
        return 0
    common = import_common(sys.argv)
    run = sub.add_parser("compare")
    run.add_argument("--common", required=True, help="directory of trajectory_common.py")
    common.add_compare_arguments(run)
    run.add_argument("--data", required=True)
    run.add_argument("--base_lr", type=float, required=True,
                     help="the recipe's lr x global batch / reference_batch_size")
    run.add_argument("--weight_decay", type=float, default=WEIGHT_DECAY)
    run.add_argument("--warmup_steps", type=int, required=True)
    run.add_argument("--warmup_factor", type=float, default=WARMUP_FACTOR)
    run.add_argument("--milestones", required=True, help="comma-separated, in steps")
    run.add_argument("--size", type=int, required=True, help="Resize's shorter side")
    run.add_argument("--backbone", default="resnet18")
    run.add_argument("--num_classes", type=int, default=80, help="without the background")
    run.add_argument("--fpn_channels", type=int, required=True)
    run.add_argument("--representation_size", type=int, required=True)
    run.add_argument("--mask_head_channels", required=True, help="comma-separated")
    run.add_argument("--stepwise_rtol", type=float, default=1e-5,
                     help="losses of each step from our weights")
    run.add_argument("--grad_rtol", type=float, default=1e-4,
                     help="gradient norm of each step from our weights")
    run.add_argument("--update_rtol", type=float, default=1e-3,
                     help="the whole update of each step from our weights")
    run.add_argument("--tensor_update_rtol", type=float, default=1e-2,
                     help="each tensor's update of each step from our weights")
    run.add_argument("--memory_format", choices=["channels_last", "nchw"], default="channels_last",
                     help="of the reference's backbone and mask head: ours runs them "
                     "channels-last on the CPU; in NCHW (torchvision's) the rounding differs "
                     "and near-ties among the RPN's scores flip now and then")
    run.add_argument("--free", action=argparse.BooleanOptionalAction, default=True,
                     help="also the free-running comparison")
    return compare(parser.parse_args(), common)


if __name__ == "__main__":
    sys.exit(main())
