"""The Python side of models/dbnet/trajectory_test.sh: MhLiao/DB's training loop, run from our
trainer's initial weights on the same batches, and compared with the trainer's run step by step.

  make_data --out DIR [--size 64]
      writes a tiny ICDAR2015-layout dataset (PNG, so that OpenCV decodes the same pixels on
      both sides): 4 training images and 1 test image with a few quadrilateral texts each,
      an ignored one (###) and one thinner than min_text_size among them.
  compare --common DIR --peers DIR --data DIR --inputs INPUTS_DIR --run RUN_DIR --chunks N
          --base_lr LR --steps K --db_epochs E [--tolerances ...]
      INPUTS_DIR holds what //models/dbnet:trajectory_inputs wrote: checkpoint_0.pt (our initial
      weights) and batch.pt (the 4 training samples as our loader makes them: pixels and
      targets). First the inputs are checked against the reference's own: the pixels must
      equal cv2.imread + ImageNet normalisation, and the targets are compared with MhLiao/DB's
      (our label generator differs from theirs by design at polygon borders,
      models/dbnet/label_generator.h; the differing pixels and the step-1 losses on their
      targets are printed). Then two comparisons with RUN_DIR (metrics.jsonl and
      checkpoint_<k>.pt for every step k):
        stepwise: reference step k starts from our weights and BatchNorm buffers after step
          k - 1 (its momentum its own): lr of every parameter group of ours, the three loss
          terms, the total loss, the gradient norm, each parameter's update and the BatchNorm
          buffers, at every step;
        free running: the reference's own K steps from the initial weights against ours (loss
          terms, gradient norm, all weights), bounded by the noise floor: a second reference run
          from initial weights moved by one float32 rounding.

The reference follows MhLiao/DB (65ca77a), whose code is described in models/dbnet/RECIPE.md:
  - optimizer: torch.optim.SGD(model.parameters(), lr, momentum=0.9, weight_decay=1e-4), one
    group, every parameter decayed (trainer.py, training/optimizer_scheduler.py); no clipping;
  - schedule: DecayLearningRate, lr = base (1 - epoch / (epochs + 1))^0.9, set on every group
    before each batch from the epoch (training/learning_rate.py, trainer.py);
  - loss: L1BalanceCELoss = Dice(binary) + 10 L1(thresh) + 5 BalanceCrossEntropy(prob) with 3
    negatives per positive (decoders/seg_detector_loss.py); the criterion sits in
    nn.DataParallel (structure/model.py), so with N devices it is computed on each device's
    share of the batch and the trainer backpropagates the mean of the N values;
  - the network in train mode, BatchNorm on batch statistics; as our recipe's deliberate D13
    (SyncBatchNorm), over the whole global batch rather than per device;
  - targets: MakeSegDetectionData and MakeBorderMap (pyclipper + OpenCV), reused from
    benchmarks/loader_peer.py; the network is benchmarks/dbnet_peer.py's DBNet (MhLiao/DB's
    SegDetector with k = 50) with the modulated deformable 3x3 convolutions of DB's
    deformable ResNet-18 (stages 2-4) put in through torchvision.ops.deform_conv2d.
Float32 throughout, on the CPU, one thread. What the trajectory tests' references share
(reading checkpoints, the optimizer's groups and metrics.jsonl, relative differences, the
Checker, the one-rounding perturbation, update differences) is models/testing/
trajectory_common.py, imported from the directory --common names.
"""
import argparse
import math
import os
import re
import sys

import cv2
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import deform_conv2d

# benchmarks/ is no package: its peers are imported by path (the test passes the directory), as
# is models/testing/trajectory_common.py (common below).
BCE_SCALE, L1_SCALE, NEGATIVE_RATIO, EPS = 5.0, 10.0, 3.0, 1e-6
MOMENTUM, WEIGHT_DECAY, POWER = 0.9, 1e-4, 0.9


# ----------------------------------------------------------------------------- data

def make_data(out, size):
    """4 training images and 1 test image, S x S, grey noise with dark quadrilaterals."""
    rng = np.random.default_rng(2026)
    s = size
    # (x, y, w, h, angle in degrees, transcription) per text, in units of S/64.
    layouts = [
        [(6, 6, 26, 12, 0, "ab"), (36, 30, 22, 14, 12, "cd"), (8, 46, 30, 10, 0, "ef")],
        [(4, 10, 34, 14, -8, "gh"), (40, 40, 18, 12, 0, "###")],
        [(10, 8, 20, 16, 0, "ij"), (34, 12, 24, 4, 0, "kl"), (12, 40, 40, 12, 6, "mn")],
        [(20, 20, 28, 20, 20, "op")],
    ]
    test_layout = [(8, 8, 30, 12, 0, "qr"), (20, 36, 30, 14, -10, "st")]
    for split, images, gt_dir in [("train", layouts, "ch4_training_localization_transcription_gt"),
                                  ("test", [test_layout], "Challenge4_Test_Task1_GT")]:
        image_dir = os.path.join(out, "ch4_training_images" if split == "train" else "ch4_test_images")
        os.makedirs(image_dir, exist_ok=True)
        os.makedirs(os.path.join(out, gt_dir), exist_ok=True)
        for i, texts in enumerate(images, start=1):
            image = rng.integers(120, 255, size=(s, s, 3), dtype=np.uint8)
            image = cv2.GaussianBlur(image, (3, 3), 0)
            lines = []
            for x, y, w, h, angle, text in texts:
                f = s / 64.0
                rect = ((f * (x + w / 2), f * (y + h / 2)), (f * w, f * h), angle)
                quad = np.rint(cv2.boxPoints(rect)).astype(np.int32)
                # Clockwise from the top-left corner, as ICDAR2015's files list them.
                quad = np.roll(np.clip(quad, 1, s - 2), -1, axis=0)
                color = [int(c) for c in rng.integers(0, 70, size=3)]
                cv2.fillPoly(image, [quad], color)
                lines.append(",".join(str(v) for v in quad.reshape(-1)) + "," + text)
            cv2.imwrite(os.path.join(image_dir, "img_%d.png" % i), image)
            with open(os.path.join(out, gt_dir, "gt_img_%d.txt" % i), "w") as f:
                f.write("\n".join(lines) + "\n")


def load_batch(data_dir, order, peers):
    """Images and MhLiao/DB targets of the training images `order` (0-based, natural order)."""
    loader_peer = peers["loader_peer"]
    images, gts, masks, thresh_maps, thresh_masks = [], [], [], [], []
    for index in order:
        name = "img_%d" % (index + 1)
        bgr = cv2.imread(os.path.join(data_dir, "ch4_training_images", name + ".png"),
                         cv2.IMREAD_COLOR)
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32)
        images.append(torch.from_numpy((rgb / 255.0 - loader_peer.MEAN) / loader_peer.STD)
                      .permute(2, 0, 1))
        polygons, ignore = loader_peer.read_ground_truth(
            os.path.join(data_dir, "ch4_training_localization_transcription_gt",
                         "gt_" + name + ".txt"))
        h, w = bgr.shape[:2]
        gt, mask, thresh_map, thresh_mask = loader_peer.db_targets(polygons, ignore, h, w)
        for out, value in [(gts, gt), (masks, mask), (thresh_maps, thresh_map),
                           (thresh_masks, thresh_mask)]:
            out.append(torch.from_numpy(value))
    return {"image": torch.stack(images).contiguous(), "gt": torch.stack(gts),
            "mask": torch.stack(masks), "thresh_map": torch.stack(thresh_maps),
            "thresh_mask": torch.stack(thresh_masks)}


def load_our_batch(common, path, order):
    archive = common.load_archive(path)
    batch = {}
    for name in ["images", "gt", "mask", "thresh_map", "thresh_mask"]:
        tensor = common.archive_tensor(archive, name)[order]
        batch["image" if name == "images" else name] = tensor.float().contiguous()
    return batch


def compare_inputs(ours, reference):
    """Pixels must be equal up to float rounding; targets are summarised."""
    failures = []
    pixel = (ours["image"] - reference["image"]).abs().max().item()
    print("inputs: pixels max |ours - cv2 reference| = %.3g" % pixel)
    if not pixel <= 1e-5:
        failures.append("our normalised pixels differ from cv2.imread + ImageNet normalisation "
                        "by up to %g (expected <= 1e-5)" % pixel)
    for name in ["gt", "mask", "thresh_mask"]:
        a, b = ours[name], reference[name]
        print("inputs: %-11s ours %5d, MhLiao/DB %5d pixels set; %4d differ (%d only ours, %d "
              "only theirs)" % (name, int(a.sum()), int(b.sum()), int((a != b).sum()),
                                int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())))
    d = (ours["thresh_map"] - reference["thresh_map"]).abs()
    print("inputs: thresh_map  max |ours - MhLiao/DB| %.3g, mean %.3g, %d pixels differ by > 1e-6"
          % (d.max().item(), d.mean().item(), int((d > 1e-6).sum())))
    return failures


# ----------------------------------------------------------------------------- model

class ModulatedDeformConv3x3(nn.Module):
    """The 3x3 convolution of DB's deformable BasicBlock (backbones/resnet.py): a plain
    convolution with bias predicts 18 offsets and 9 mask logits, the mask goes through a
    sigmoid, and the deformable convolution has no bias."""

    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, channels, 3, 3))
        self.conv_offset = nn.Conv2d(channels, 27, 3, padding=1)

    def forward(self, x):
        predicted = self.conv_offset(x)
        return deform_conv2d(x, predicted[:, :18], self.weight, None, padding=(1, 1),
                             mask=predicted[:, 18:].sigmoid())


def build_model(peers):
    model = peers["dbnet_peer"].DBNet(inner=256, k=50.0)
    for stage in model.layers[1:]:  # stage_with_dcn = [false, true, true, true]
        for block in stage:
            block.conv2 = ModulatedDeformConv3x3(block.conv2.out_channels)
    return model


def peer_name(native):
    """This project's parameter name (tools/export layout "native") -> dbnet_peer's."""
    name = native
    name = re.sub(r"^backbone\.conv1\.", "stem.0.", name)
    name = re.sub(r"^backbone\.bn1\.", "stem.1.", name)
    name = re.sub(r"^backbone\.layer(\d)\.", lambda m: "layers.%d." % (int(m.group(1)) - 1), name)
    name = re.sub(r"^neck\.(lateral|smooth)(\d)\.", r"\1.\2.", name)
    name = re.sub(r"^head\.probability\.", "prob.", name)
    name = re.sub(r"^head\.threshold\.", "thresh.", name)
    return name


# ----------------------------------------------------------------------------- losses

def balance_cross_entropy(pred, gt, mask):
    """MhLiao/DB's BalanceCrossEntropyLoss: all positives and the 3x as many hardest
    negatives."""
    positive = (gt * mask).byte()
    negative = ((1 - gt) * mask).byte()
    positive_count = int(positive.float().sum())
    negative_count = min(int(negative.float().sum()), int(positive_count * NEGATIVE_RATIO))
    loss = F.binary_cross_entropy(pred, gt, reduction="none")
    positive_loss = loss * positive.float()
    negative_loss, _ = torch.topk((loss * negative.float()).view(-1), negative_count)
    return (positive_loss.sum() + negative_loss.sum()) / (positive_count + negative_count + EPS)


def mask_l1(pred, gt, mask):
    mask_sum = mask.sum()
    if mask_sum.item() == 0:
        return mask_sum
    return (torch.abs(pred - gt) * mask).sum() / mask_sum


def dice(pred, gt, mask):
    intersection = (pred * gt * mask).sum()
    union = (pred * mask).sum() + (gt * mask).sum() + EPS
    return 1 - 2.0 * intersection / union


def l1_balance_ce(prob, thresh, binary, batch, rows):
    """L1BalanceCELoss on the batch rows `rows`, as its weighted terms under our names."""
    gt, mask = batch["gt"][rows], batch["mask"][rows]
    return {
        "loss_prob": BCE_SCALE * balance_cross_entropy(prob[rows], gt, mask),
        "loss_binary": dice(binary[rows], gt, mask),
        "loss_thresh": L1_SCALE * mask_l1(thresh[rows], batch["thresh_map"][rows],
                                          batch["thresh_mask"][rows]),
    }


# ----------------------------------------------------------------------------- comparison

class Reference:
    """MhLiao/DB's training loop on one fixed global batch: torch.optim.SGD over
    model.parameters(), DecayLearningRate set on every group before each batch, the mean over
    the `world` shares of L1BalanceCELoss, backward, step."""

    def __init__(self, peers, state, batch, world, base_lr, db_epochs):
        self.model = build_model(peers)
        self.model.load_state_dict(state, strict=True)
        self.model.train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=base_lr, momentum=MOMENTUM,
                                         weight_decay=WEIGHT_DECAY)
        self.batch, self.world, self.base_lr, self.db_epochs = batch, world, base_lr, db_epochs

    def losses(self, targets):
        prob, thresh, binary = self.model(self.batch["image"])
        per_rank = self.batch["image"].shape[0] // self.world
        terms = {}
        for r in range(self.world):
            for name, value in l1_balance_ce(prob, thresh, binary, targets,
                                             slice(r * per_rank, (r + 1) * per_rank)).items():
                terms[name] = terms.get(name, 0) + value / self.world
        terms["loss"] = terms["loss_binary"] + terms["loss_thresh"] + terms["loss_prob"]
        return terms

    def step(self, step, state=None):
        """Optimizer step `step` (1-based; one batch per epoch), from `state` (weights and
        buffers, copied in place: the momentum stays) or from where the last step ended.
        Returns the step's values and the weights and buffers after it."""
        if state is not None:
            self.model.load_state_dict(state, strict=True)
        epoch = step - 1
        lr = self.base_lr * math.pow(1.0 - epoch / float(self.db_epochs + 1), POWER)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad()
        terms = self.losses(self.batch)
        terms["loss"].backward()
        grad_norm = math.sqrt(sum(p.grad.double().pow(2).sum().item()
                                  for p in self.model.parameters() if p.grad is not None))
        self.optimizer.step()
        values = {name: value.item() for name, value in terms.items()}
        values.update(lr=lr, grad_norm=grad_norm)
        return values, {k: v.detach().clone() for k, v in self.model.state_dict().items()}


def check_values(checker, common, mode, step, ours, ref, rtol, grad_rtol):
    """The loss terms, the total loss and the gradient norm of a step, ours against `ref`."""
    for name in ["loss_prob", "loss_binary", "loss_thresh", "loss", "grad_norm"]:
        checker.check(mode, name, step, common.relative(ours[name], ref[name]),
                      grad_rtol if name == "grad_norm" else rtol,
                      "expected %.9g, saw %.9g" % (ref[name], ours[name]))


def compare(args, peers, common):
    torch.set_num_threads(1)
    world = args.chunks
    global_batch = 4
    # The trainer's distributed sampler without shuffling: rank r takes images r, r + N, ...
    # Stacked rank by rank, so that rows [r * B, (r + 1) * B) are rank r's share.
    order = [i for rows in common.rank_rows(global_batch, world) for i in rows]
    batch = load_our_batch(common, os.path.join(args.inputs, "batch.pt"), order)
    db_batch = load_batch(args.data, order, peers)
    checker = common.Checker()
    checker.failures += compare_inputs(batch, db_batch)
    print("reference: %d images of %dx%d, %d ranks of %d; %d positive and %d ignored pixels"
          % (global_batch, batch["image"].shape[2], batch["image"].shape[3], world,
             global_batch // world, int((batch["gt"] * batch["mask"]).sum()),
             int((batch["mask"] == 0).sum())))

    _, initial = common.checkpoint_tensors(os.path.join(args.inputs, "checkpoint_0.pt"),
                                           peer_name)
    names = sorted(build_model(peers).state_dict())
    if sorted(initial) != names:
        sys.exit("FAIL: parameter names differ between our checkpoint and the reference: %s"
                 % sorted(set(initial) ^ set(names)))
    ours_by_step = common.read_metrics(args.run, args.steps)

    # What MhLiao/DB's own targets would give at the initial weights (reported, not checked).
    probe = Reference(peers, initial, batch, world, args.base_lr, args.db_epochs)
    with torch.no_grad():
        on_ours, on_theirs = probe.losses(batch), probe.losses(db_batch)
    print("step-1 losses on our targets / on MhLiao/DB's targets: " + ", ".join(
        "%s %.5f / %.5f (%+.2f%%)" % (name, on_ours[name].item(), on_theirs[name].item(),
                                      100 * (on_ours[name].item() / on_theirs[name].item() - 1))
        for name in ["loss_prob", "loss_binary", "loss_thresh", "loss"]))

    # 1. Step by step: every reference step starts from our weights and BatchNorm buffers after
    # the previous step (its momentum is its own), so float rounding cannot accumulate and the
    # checks are tight: lr of every group, losses, gradient norm, the update of every tensor.
    reference = Reference(peers, initial, batch, world, args.base_lr, args.db_epochs)
    params = [n for n in names if "running" not in n and not n.endswith("num_batches_tracked")]
    before = initial
    ours_states = {}
    for step in range(1, args.steps + 1):
        ref, after = reference.step(step, before)
        ours = ours_by_step[step]
        checker.check("stepwise", "lr", step, common.relative(ours["lr"], ref["lr"]),
                      args.lr_rtol)
        archive, ours_after = common.checkpoint_tensors(
            os.path.join(args.run, "checkpoint_%d.pt" % step), peer_name)
        for i, g in enumerate(common.optimizer_groups(archive)):
            checker.check("stepwise", "lr", step, common.relative(g["lr"], ref["lr"]),
                          args.lr_rtol, "group %d of %d tensors" % (i, g["params"]))
            if g.get("weight_decay") != WEIGHT_DECAY:
                checker.fail("step %d: our parameter group %d has weight decay %s, the reference "
                             "decays every parameter by %g"
                             % (step, i, g.get("weight_decay"), WEIGHT_DECAY))
        check_values(checker, common, "stepwise", step, ours, ref, args.stepwise_rtol,
                     args.grad_rtol)
        # Parameters: the step's update. A tensor whose gradient is zero up to rounding (the
        # bias of a convolution that BatchNorm follows) is measured against 1e-4 of the whole
        # update rather than its own.
        total_d, each = common.update_differences(before, ours_after, after, params)
        checker.check("stepwise", "update", step, total_d, args.update_rtol, "all parameters")
        worst_update = (0.0, "")
        for name in params:
            checker.check("stepwise", "updates", step, each[name], args.tensor_update_rtol, name)
            worst_update = max(worst_update, (each[name], name))
        for name in names:
            if name.endswith("num_batches_tracked"):
                if int(ours_after[name]) != int(after[name]):
                    checker.fail("step %d %s: expected %d, saw %d" % (
                        step, name, int(after[name]), int(ours_after[name])))
            elif "running" in name:  # what the step's forward made of the buffers
                checker.check("stepwise", "buffers", step,
                              common.tensor_relative(ours_after[name], after[name]),
                              args.stepwise_rtol, name)
        print("step %2d lr %.6e loss %.7f (ours %.7f) grad_norm %.6f (ours %.6f) update %.2e (%s)"
              % (step, ref["lr"], ref["loss"], ours["loss"], ref["grad_norm"], ours["grad_norm"],
                 worst_update[0], worst_update[1]), flush=True)
        before = ours_after
        ours_states[step] = ours_after

    # 2. Free running: the reference's own trajectory from the initial weights, against ours.
    # DB's loss is not smooth in the weights at float32 resolution (ResNet stages of 2x2 and
    # 4x4 pixels normalised by BatchNorm over 4 images, OHEM's top-k), so rounding differences
    # grow; how much is measured by a second reference run from initial weights moved by one
    # float32 rounding (relative 2^-24), whose distance to the first is the noise floor.
    def free_run(state):
        run = Reference(peers, state, batch, world, args.base_lr, args.db_epochs)
        return [run.step(step) for step in range(1, args.steps + 1)]

    free = free_run(initial)
    floor = free_run(common.perturb(initial, torch.Generator().manual_seed(0)))
    for step in range(1, args.steps + 1):
        ref, ref_after = free[step - 1]
        noise, noise_after = floor[step - 1]
        for name in ["loss_prob", "loss_binary", "loss_thresh", "loss", "grad_norm"]:
            checker.check("free", name, step,
                          common.relative(ours_by_step[step][name], ref[name]), float("inf"))
            checker.check("floor", name, step, common.relative(noise[name], ref[name]),
                          float("inf"))
        for mode, states in [("free", ours_states[step]), ("floor", noise_after)]:
            d = max((common.tensor_relative(states[n], ref_after[n]), n) for n in params)
            checker.check(mode, "weights", step, d[0], float("inf"), d[1])
    # Ours may stray from the reference only as far as a rounding of the start sends the
    # reference itself, with a margin: free-running differences within free_factor x floor.
    checker.within_floor(["loss_prob", "loss_binary", "loss_thresh", "loss", "grad_norm",
                          "weights"], args.free_factor, args.floor_min)

    checker.report(args.steps, ["stepwise", "free", "floor"],
                   ["lr", "loss_prob", "loss_binary", "loss_thresh", "loss", "grad_norm",
                    "update", "updates", "buffers", "weights"])
    literal = max(common.relative(math.pow(1 - e / float(args.steps), POWER),
                                  math.pow(1 - e / float(args.steps + 1), POWER))
                  for e in range(args.steps))
    print("note: DB's epochs = %d runs %d epochs; with epochs = %d (our max_epochs taken "
          "literally, D10) its lr would differ by up to %.3g relative" % (
              args.db_epochs, args.db_epochs + 1, args.steps, literal))
    return checker.finish(args.steps, world)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make_data")
    make.add_argument("--out", required=True)
    make.add_argument("--size", type=int, default=64)
    if sys.argv[1:2] == ["make_data"]:
        args = parser.parse_args()
        make_data(args.out, args.size)
        return 0
    run = sub.add_parser("compare")
    run.add_argument("--common", required=True, help="directory of trajectory_common.py")
    # trajectory_common.py is no package: imported by path before the rest is parsed.
    pre = argparse.ArgumentParser(prog="compare", add_help=False)
    pre.add_argument("--common", required=True)
    sys.path.insert(0, pre.parse_known_args(sys.argv[2:])[0].common)
    import trajectory_common as common  # noqa: E402
    common.add_compare_arguments(run)
    run.add_argument("--peers", required=True, help="directory of dbnet_peer.py, loader_peer.py")
    run.add_argument("--data", required=True)
    run.add_argument("--base_lr", type=float, required=True)
    run.add_argument("--db_epochs", type=int, required=True)
    run.add_argument("--stepwise_rtol", type=float, default=1e-5,
                     help="losses, gradient norm, BatchNorm buffers of each step from our weights")
    run.add_argument("--grad_rtol", type=float, default=1e-3,
                     help="gradient norm of each step from our weights")
    run.add_argument("--update_rtol", type=float, default=1e-3,
                     help="the whole update of each step from our weights")
    run.add_argument("--tensor_update_rtol", type=float, default=1e-2,
                     help="each tensor's update of each step from our weights")
    args = parser.parse_args()
    sys.path.insert(0, args.peers)
    import dbnet_peer  # noqa: E402
    import loader_peer  # noqa: E402
    return compare(args, {"dbnet_peer": dbnet_peer, "loader_peer": loader_peer}, common)


if __name__ == "__main__":
    sys.exit(main())
