"""Reference side of mask_rcnn_parity_test: torchvision 0.26's Mask R-CNN (the architecture of
maskrcnn_resnet50_fpn: ResNet-50 with frozen BatchNorm and trainable layers 2-4, FPN with the
max-pooled P6) with seeded random weights, run on two small images of different sizes.

Writes to the directory given as the only argument:
  weights.pt  the model's state dict (torchvision's key names), as a plain dict;
  case.pt     inputs and outputs, a plain dict of tensors (keys below).

The images enter already normalised and padded (torchvision's GeneralizedRCNNTransform is
bypassed: its resize is the data pipeline's job in our framework, and at scale 1 it is the
identity anyway). Sampling is made deterministic by per-image sample sizes larger than the
candidate counts, and the per-level/per-image top-n are larger than the anchor counts, so both
sides keep every candidate.

Both sides compute in float64 (from the float32 weights, which convert exactly): in float32
the rounding noise of a random ResNet-50 alone moves gradients by up to 1e-2 relative (torchvision
against itself with 1 and 2 threads: 1.7e-2 on layer2.0.conv1, 1.7e-3 on fc6), far above the
differences an implementation error would make; in float64 it is below 1e-10.
"""
import sys

import torch
import torch.nn.functional as F
from torchvision.models import resnet50
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.roi_heads import paste_masks_in_image
from torchvision.ops import misc as misc_nn_ops

NUM_CLASSES = 4  # background + 3
SIZES = [(120, 160), (144, 112)]  # (height, width) of each image
PADDED = (160, 160)  # both sides padded to a multiple of 32
BIG = 100000
GRAD_PARAMS = [
    "backbone.body.layer2.0.conv1.weight",
    "backbone.body.layer4.2.conv3.weight",
    "backbone.fpn.inner_blocks.3.0.weight",
    "backbone.fpn.layer_blocks.0.0.weight",
    "rpn.head.conv.0.0.weight",
    "rpn.head.cls_logits.weight",
    "rpn.head.bbox_pred.weight",
    "roi_heads.box_head.fc6.weight",
    "roi_heads.box_predictor.cls_score.weight",
    "roi_heads.box_predictor.bbox_pred.weight",
    "roi_heads.mask_head.0.0.weight",
    "roi_heads.mask_predictor.conv5_mask.weight",
    "roi_heads.mask_predictor.mask_fcn_logits.weight",
]


def build():
    body = resnet50(weights=None, norm_layer=misc_nn_ops.FrozenBatchNorm2d)
    backbone = _resnet_fpn_extractor(body, 3)
    model = MaskRCNN(
        backbone,
        num_classes=NUM_CLASSES,
        rpn_pre_nms_top_n_train=BIG,
        rpn_pre_nms_top_n_test=BIG,
        rpn_post_nms_top_n_train=BIG,
        rpn_post_nms_top_n_test=BIG,
        rpn_batch_size_per_image=BIG,
        box_batch_size_per_image=BIG,
    )
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        # Spread the scores so that top-k and NMS are not decided by rounding: random heads
        # at torchvision's N(0, 0.01) give nearly equal objectness and class scores.
        for p in [model.rpn.head.cls_logits.weight, model.roi_heads.box_predictor.cls_score.weight]:
            p.normal_(0.0, 0.05, generator=g)
        for p in [model.rpn.head.bbox_pred.weight, model.roi_heads.box_predictor.bbox_pred.weight]:
            p.normal_(0.0, 0.01, generator=g)
    return model


def calibrate_frozen_batchnorm(model, batch):
    """Gives every FrozenBatchNorm2d the statistics of its input on `batch` and a random affine
    part, as a trained network has: identity statistics would let a random ResNet-50's
    activations grow block after block until every score saturates."""
    g = torch.Generator().manual_seed(3)

    def hook(module, inputs):
        x = inputs[0]
        module.running_mean.copy_(x.mean(dim=(0, 2, 3)))
        module.running_var.copy_(x.var(dim=(0, 2, 3)))
        module.weight.copy_(0.5 + 0.5 * torch.rand(module.weight.shape, generator=g))
        module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=g))

    handles = [m.register_forward_pre_hook(hook) for m in model.modules()
               if isinstance(m, misc_nn_ops.FrozenBatchNorm2d)]
    with torch.no_grad():
        model.backbone.body(batch)
    for h in handles:
        h.remove()
    return model


def make_inputs():
    g = torch.Generator().manual_seed(2)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    batch = torch.zeros(len(SIZES), 3, *PADDED)
    targets = []
    for i, (h, w) in enumerate(SIZES):
        # A smooth image with a few bright shapes, the objects' masks.
        low = torch.rand(1, 3, h // 8, w // 8, generator=g)
        image = F.interpolate(low, size=(h, w), mode="bilinear", align_corners=False)[0]
        masks, boxes, labels = [], [], []
        for k in range(3 if i == 0 else 2):
            x1 = int(torch.randint(0, w // 2, (1,), generator=g))
            y1 = int(torch.randint(0, h // 2, (1,), generator=g))
            x2 = min(w, x1 + int(torch.randint(20, w // 2, (1,), generator=g)))
            y2 = min(h, y1 + int(torch.randint(20, h // 2, (1,), generator=g)))
            yy, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            cy, cx = (y1 + y2 - 1) / 2, (x1 + x2 - 1) / 2
            ry, rx = (y2 - y1) / 2, (x2 - x1) / 2
            m = (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2) <= 1.0
            image[:, m] = torch.rand(3, 1, generator=g)
            ys, xs = torch.nonzero(m, as_tuple=True)
            boxes.append([xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1])
            masks.append(m.to(torch.uint8))
            labels.append(1 + (k % (NUM_CLASSES - 1)))
        batch[i, :, :h, :w] = (image - mean) / std
        targets.append({
            "boxes": torch.tensor(boxes, dtype=torch.float32),
            "labels": torch.tensor(labels, dtype=torch.int64),
            "masks": torch.stack(masks),
        })
    return batch, targets


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build()
    batch, targets = make_inputs()
    calibrate_frozen_batchnorm(model, batch)
    torch.save(dict(model.state_dict()), f"{out}/weights.pt")
    model = model.double()
    batch = batch.double()
    for t in targets:
        t["boxes"] = t["boxes"].double()
    images = ImageList(batch, list(SIZES))
    case = {"images": batch, "image_sizes": torch.tensor(SIZES, dtype=torch.int64)}
    for i, t in enumerate(targets):
        for k, v in t.items():
            case[f"gt_{k}_{i}"] = v

    model.eval()
    with torch.no_grad():
        features = model.backbone(batch)
        proposals, _ = model.rpn(images, features)
        detections, _ = model.roi_heads(features, proposals, images.image_sizes)
    for i, d in enumerate(detections):
        case[f"proposals_{i}"] = proposals[i]
        case[f"det_boxes_{i}"] = d["boxes"]
        case[f"det_scores_{i}"] = d["scores"]
        case[f"det_labels_{i}"] = d["labels"]
        case[f"det_mask_probs_{i}"] = d["masks"]
        pasted = paste_masks_in_image(d["masks"], d["boxes"], SIZES[i], padding=1)
        case[f"det_masks_{i}"] = (pasted[:, 0] > 0.5).to(torch.uint8)

    model.train()
    features = model.backbone(batch)
    train_proposals, rpn_losses = model.rpn(images, features, targets)
    _, roi_losses = model.roi_heads(features, train_proposals, images.image_sizes, targets)
    losses = {**rpn_losses, **roi_losses}
    sum(losses.values()).backward()
    for k, v in losses.items():
        case[k] = v.detach()
    params = dict(model.named_parameters())
    for name in GRAD_PARAMS:
        case[f"grad/{name}"] = params[name].grad.detach().clone()

    torch.save(case, f"{out}/case.pt")
    print("wrote", out, {k: round(float(v.detach()), 6) for k, v in losses.items()})


if __name__ == "__main__":
    main()
