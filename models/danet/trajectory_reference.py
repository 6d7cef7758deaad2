"""The Python side of models/danet/trajectory_test.sh: the DANet authors' training loop
(junfu1115/DANet c7a2f60, "[D18]" in models/danet/RECIPE.md), run from our trainer's initial
weights on the same batches, and compared with the trainer's run step by step.

  make_data --out DIR [--size 64]
      writes a tiny Cityscapes-layout dataset (PNG, so that OpenCV decodes the same pixels on
      both sides): 4 training images (city "aachen") and 1 validation image ("frankfurt"), S x S,
      with rectangles of a few classes on noise, each class its own colour, and unlabeled
      (label id 0, train id 255: ignored) pixels among them; label maps of official label ids.
  compare --peers DIR --data DIR --inputs INPUTS_DIR --run RUN_DIR --chunks N --base_lr LR
          --steps K [--tolerances ...]
      INPUTS_DIR holds what //models/danet:trajectory_inputs wrote: checkpoint_0.pt (our initial
      weights) and batch.pt (the 4 training samples as our loader makes them: pixels and train
      ids). First the inputs are checked: the pixels must equal cv2.imread + ImageNet
      normalisation (their ToTensor + Normalize), the labels the label ids mapped to train ids
      (their train-id PNGs). Then two comparisons with RUN_DIR (metrics.jsonl and
      checkpoint_<k>.pt for every step k):
        stepwise: reference step k starts from our weights and BatchNorm buffers after step
          k - 1 (its momentum its own): lr of both parameter groups, the three loss terms, the
          total loss, the gradient norm, each parameter's update and the BatchNorm buffers
          (with --stepwise_floor the gradient norm and updates may also be up to free_factor
          x what a second reference does, each step from our weights moved by one float32
          rounding);
        free running: the reference's own K steps from the initial weights against ours (loss
          terms, gradient norm, all weights), bounded by the noise floor: a second reference run
          from initial weights moved by one float32 rounding.

The reference follows [D18] as RECIPE.md's table R1-R14 reads it:
  - optimizer: torch.optim.SGD([{backbone ("model.pretrained") params, lr}, {head params,
    10 lr}], momentum=0.9, weight_decay=1e-4), every parameter decayed: norms, biases and the
    attention gammas (danet/train.py); no clipping, float32;
  - schedule: LR_Scheduler 'poly' per iteration, lr = base (1 - T / N)^0.9 with T = epoch x
    iters_per_epoch + i (0 at the first step) and N = epochs x iters_per_epoch, set before each
    step: group 0 (the backbone) at lr, every other group at 10 lr
    (encoding/utils/lr_scheduler.py);
  - loss: SegmentationMultiLosses, cross-entropy (ignore 255, their -1) of the fused, position
    and channel outputs summed with weight 1 each, each the mean over one device's valid pixels;
    DataParallelCriterion averages the devices' values, so with N devices (--chunks) it is the
    mean over the N shares of the batch (encoding/nn/customize.py, encoding/parallel.py);
  - the outputs upsampled to the input bilinearly with align_corners=True (their _up_kwargs);
  - BatchNorm: encoding.nn.BatchNorm2d, synchronised over all devices: batch statistics of the
    whole global batch (as our SyncBatchNorm), momentum 0.1, unbiased running variance;
  - the network: benchmarks/danet_peer.py's DANet (dilated ResNet at output stride 8 with
    multi-grid, torchvision's layout; the head of models/danet/testdata/make_danet_golden.py,
    the authors' DANetHead), with Dropout2d at p = 0 (the test sets our dropout: 0, so both
    sides are deterministic; their p is 0.1).
Float32 throughout, on the CPU, one thread.
"""
import argparse
import json
import math
import os
import sys

import cv2
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MOMENTUM, WEIGHT_DECAY, POWER, HEAD_LR_FACTOR, IGNORE = 0.9, 1e-4, 0.9, 10.0, 255
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
# Label id -> train id (cityscapesScripts' labels.py) of the ids make_data draws.
LABEL_IDS = {0: IGNORE, 7: 0, 8: 1, 11: 2, 21: 8, 23: 10, 24: 11, 26: 13}
TRAIN_CITY, VAL_CITY = "aachen", "frankfurt"
LOSSES = ["loss_fused", "loss_position", "loss_channel"]


# ----------------------------------------------------------------------------- data

def make_data(out, size):
    """4 training images and 1 validation image, S x S: noise, a background class, and a few
    rectangles of other classes, each class a colour of its own (so the task is learnable) and
    one unlabeled rectangle per image."""
    rng = np.random.default_rng(2026)
    s = size
    colours = {7: (128, 64, 128), 8: (232, 35, 244), 11: (70, 70, 70), 21: (35, 142, 107),
               23: (180, 130, 70), 24: (60, 20, 220), 26: (142, 0, 0), 0: (0, 0, 0)}  # BGR
    for split, city, count in [("train", TRAIN_CITY, 4), ("val", VAL_CITY, 1)]:
        image_dir = os.path.join(out, "leftImg8bit", split, city)
        label_dir = os.path.join(out, "gtFine", split, city)
        os.makedirs(image_dir, exist_ok=True)
        os.makedirs(label_dir, exist_ok=True)
        for i in range(count):
            label = np.full((s, s), 23 if i % 2 else 7, dtype=np.uint8)
            for _ in range(4):
                lid = int(rng.choice([8, 11, 21, 24, 26]))
                x0, y0 = rng.integers(0, s - 8, size=2)
                w, h = rng.integers(6, s // 2, size=2)
                label[y0:y0 + h, x0:x0 + w] = lid
            x0, y0 = rng.integers(0, s - 8, size=2)
            label[y0:y0 + 6, x0:x0 + 10] = 0
            image = np.zeros((s, s, 3), dtype=np.float64)
            for lid, bgr in colours.items():
                image[label == lid] = bgr
            image += rng.normal(0, 25, size=image.shape)
            image = np.clip(np.rint(image), 0, 255).astype(np.uint8)
            stem = "%s_000000_%06d" % (city, 19 + i)
            cv2.imwrite(os.path.join(image_dir, stem + "_leftImg8bit.png"), image)
            cv2.imwrite(os.path.join(label_dir, stem + "_gtFine_labelIds.png"), label)


def load_their_batch(data_dir, order):
    """Images (cv2 -> RGB -> ToTensor + Normalize) and train ids of the training images
    `order` (0-based, in file-name order)."""
    image_dir = os.path.join(data_dir, "leftImg8bit", "train", TRAIN_CITY)
    stems = sorted(f[:-len("_leftImg8bit.png")] for f in os.listdir(image_dir))
    images, labels = [], []
    for index in order:
        bgr = cv2.imread(os.path.join(image_dir, stems[index] + "_leftImg8bit.png"),
                         cv2.IMREAD_COLOR)
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32)
        images.append(torch.from_numpy((rgb / 255.0 - MEAN) / STD).permute(2, 0, 1))
        ids = cv2.imread(os.path.join(data_dir, "gtFine", "train", TRAIN_CITY,
                                      stems[index] + "_gtFine_labelIds.png"),
                         cv2.IMREAD_UNCHANGED)
        train = np.full(ids.shape, IGNORE, dtype=np.int64)
        for lid, tid in LABEL_IDS.items():
            train[ids == lid] = tid
        labels.append(torch.from_numpy(train))
    return {"image": torch.stack(images).contiguous(), "label": torch.stack(labels)}


def load_our_batch(path, order):
    archive = torch.jit.load(path, map_location="cpu")
    return {"image": archive.images.detach()[order].float().contiguous(),
            "label": archive.semantic.detach()[order].long()}


def compare_inputs(ours, theirs):
    failures = []
    pixel = (ours["image"] - theirs["image"]).abs().max().item()
    print("inputs: pixels max |ours - cv2 reference| = %.3g" % pixel)
    if not pixel <= 1e-5:
        failures.append("our normalised pixels differ from cv2.imread + ImageNet normalisation "
                        "by up to %g (expected <= 1e-5)" % pixel)
    differ = int((ours["label"] != theirs["label"]).sum())
    print("inputs: labels %d pixels differ from the label ids mapped to train ids; %d ignored"
          % (differ, int((theirs["label"] == IGNORE).sum())))
    if differ:
        failures.append("%d label pixels differ from the train ids of the label maps" % differ)
    return failures


# ----------------------------------------------------------------------------- model

def build_model(peers):
    model = peers["danet_peer"].DANet(18, 19)
    for module in model.modules():  # our dropout: 0 (deterministic on both sides)
        if isinstance(module, nn.Dropout2d):
            module.p = 0.0
    return model


def checkpoint_tensors(path):
    archive = torch.jit.load(path, map_location="cpu")
    tensors = {k: v.detach().clone() for k, v in archive.model.named_parameters()}
    tensors.update({k: v.detach().clone() for k, v in archive.model.named_buffers()})
    return archive, tensors


def optimizer_groups(archive):
    """(lr, weight_decay, momentum, dampening, nesterov, number of parameters) of each parameter
    group of a LibTorch optimizer's archive (torch::optim::Optimizer::save: submodules
    "param_groups/<i>" of optimizer.param_groups, each with its "options" and "params/size")."""
    groups = []
    for name, group in archive.optimizer.param_groups.named_children():
        options = group.options
        groups.append((float(options.lr), float(options.weight_decay), float(options.momentum),
                       float(options.dampening), bool(options.nesterov),
                       int(getattr(group, "params/size"))))
    return groups


# ----------------------------------------------------------------------------- comparison

def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def tensor_relative(ours, ref):
    """||ours - ref|| / ||ref|| (ref all zero: ||ours - ref||)."""
    diff = (ours.double() - ref.double()).norm().item()
    scale = ref.double().norm().item()
    return diff / scale if scale > 0 else diff


class Reference:
    """[D18]'s training loop on one fixed global batch: SGD with the backbone's and the head's
    parameter groups, LR_Scheduler 'poly' set before each step, the mean over the `world` shares
    of SegmentationMultiLosses, backward, step."""

    def __init__(self, peers, state, batch, world, base_lr, steps):
        self.model = build_model(peers)
        self.model.load_state_dict(state, strict=True)
        self.model.train()
        self.optimizer = torch.optim.SGD(
            [{"params": self.model.backbone.parameters(), "lr": base_lr},
             {"params": self.model.head.parameters(), "lr": base_lr * HEAD_LR_FACTOR}],
            lr=base_lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
        self.batch, self.world, self.base_lr, self.steps = batch, world, base_lr, steps

    def losses(self):
        outputs = self.model(self.batch["image"])
        per_rank = self.batch["image"].shape[0] // self.world
        terms = {}
        for r in range(self.world):
            rows = slice(r * per_rank, (r + 1) * per_rank)
            for name, out in zip(LOSSES, outputs):
                value = F.cross_entropy(out[rows], self.batch["label"][rows], ignore_index=IGNORE)
                terms[name] = terms.get(name, 0) + value / self.world
        terms["loss"] = terms["loss_fused"] + terms["loss_position"] + terms["loss_channel"]
        return terms

    def step(self, step, state=None):
        """Optimizer step `step` (1-based), from `state` (weights and buffers, copied in place:
        the momentum stays) or from where the last step ended. Returns the step's values and the
        weights and buffers after it."""
        if state is not None:
            self.model.load_state_dict(state, strict=True)
        t = step - 1  # T = epoch * iters_per_epoch + i
        lr = self.base_lr * math.pow(1.0 - t / float(self.steps), POWER)
        self.optimizer.param_groups[0]["lr"] = lr
        for group in self.optimizer.param_groups[1:]:
            group["lr"] = lr * HEAD_LR_FACTOR
        self.optimizer.zero_grad()
        terms = self.losses()
        terms["loss"].backward()
        grad_norm = math.sqrt(sum(p.grad.double().pow(2).sum().item()
                                  for p in self.model.parameters() if p.grad is not None))
        self.optimizer.step()
        values = {name: value.item() for name, value in terms.items()}
        values.update(lr=lr, grad_norm=grad_norm)
        return values, {k: v.detach().clone() for k, v in self.model.state_dict().items()}


class Checker:
    def __init__(self):
        self.failures, self.worst = [], {}

    def check(self, mode, quantity, step, d, rtol, detail=""):
        key = (mode, quantity)
        if d > self.worst.get(key, (-1, 0, ""))[0]:
            self.worst[key] = (d, step, detail)
        if not d <= rtol:  # also catches NaN
            self.failures.append("%s step %d %s: relative difference %.3g > %.3g%s"
                                 % (mode, step, quantity, d, rtol, detail and " (" + detail + ")"))

    def values(self, mode, step, ours, ref, rtol, grad_rtol):
        for name in LOSSES + ["loss", "grad_norm"]:
            self.check(mode, name, step, relative(ours[name], ref[name]),
                       grad_rtol if name == "grad_norm" else rtol,
                       "expected %.9g, saw %.9g" % (ref[name], ours[name]))


def compare(args, peers):
    torch.set_num_threads(1)
    world = args.chunks
    global_batch = 4
    # The trainer's distributed sampler without shuffling: rank r takes images r, r + N, ...
    # Stacked rank by rank, so that rows [r * B, (r + 1) * B) are rank r's share.
    order = [i for r in range(world) for i in range(r, global_batch, world)]
    batch = load_our_batch(os.path.join(args.inputs, "batch.pt"), order)
    checker = Checker()
    checker.failures += compare_inputs(batch, load_their_batch(args.data, order))
    print("reference: %d images of %dx%d, %d ranks of %d; %d ignored pixels"
          % (global_batch, batch["image"].shape[2], batch["image"].shape[3], world,
             global_batch // world, int((batch["label"] == IGNORE).sum())))

    _, initial = checkpoint_tensors(os.path.join(args.inputs, "checkpoint_0.pt"))
    model = build_model(peers)
    names = sorted(model.state_dict())
    if sorted(initial) != names:
        sys.exit("FAIL: parameter names differ between our checkpoint and the reference: %s"
                 % sorted(set(initial) ^ set(names)))
    backbone_count = len(list(model.backbone.parameters()))
    head_count = len(list(model.head.parameters()))
    with open(os.path.join(args.run, "metrics.jsonl")) as f:
        ours_by_step = {r["step"]: r for r in map(json.loads, f) if "loss" in r}
    missing = [k for k in range(1, args.steps + 1) if k not in ours_by_step or not
               os.path.exists(os.path.join(args.run, "checkpoint_%d.pt" % k))]
    if missing:
        sys.exit("FAIL: steps %s lack a metrics.jsonl record or a checkpoint in %s" % (missing,
                                                                                       args.run))

    # 1. Step by step: every reference step starts from our weights and BatchNorm buffers after
    # the previous step (its momentum is its own), so float rounding cannot accumulate and the
    # checks are tight: lr of every group, losses, gradient norm, the update of every tensor.
    reference = Reference(peers, initial, batch, world, args.base_lr, args.steps)
    generator = torch.Generator().manual_seed(0)

    def perturb(state):
        """`state` with every float moved by one float32 rounding (relative 2^-24) at random."""
        return {k: (v * (1 + (2.0 ** -24) * torch.randint(-1, 2, v.shape, generator=generator))
                    if v.is_floating_point() else v) for k, v in state.items()}

    # The stepwise noise floor (--stepwise_floor): a second reference, each step from our
    # weights moved by one rounding; how far its gradient norm and update stray from the
    # reference's bounds ours (SyncBatchNorm's sums over ranks round differently from one
    # process's, and a ReLU or max-pooling choice flipped by a rounding moves a gradient).
    floor_reference = (Reference(peers, initial, batch, world, args.base_lr, args.steps)
                       if args.stepwise_floor else None)
    floored = ["grad_norm", "update", "updates"]
    big = float("inf") if args.stepwise_floor else None
    before = initial
    ours_states = {}
    params = [n for n in names if "running" not in n and not n.endswith("num_batches_tracked")]

    def update_differences(other_after, ref_after):
        """||other update - ref update|| / ||ref update|| of all parameters, and of each tensor
        (a tensor whose update is zero up to rounding measured against 1e-4 of the whole)."""
        ref_update = {n: ref_after[n].double() - before[n].double() for n in params}
        other_update = {n: other_after[n].double() - before[n].double() for n in params}
        total = math.sqrt(sum(u.pow(2).sum().item() for u in ref_update.values()))
        total_diff = math.sqrt(sum((other_update[n] - ref_update[n]).pow(2).sum().item()
                                   for n in params))
        each = {n: (other_update[n] - ref_update[n]).norm().item() / max(
            ref_update[n].norm().item(), 1e-4 * total) for n in params}
        return total_diff / total, each

    for step in range(1, args.steps + 1):
        ref, after = reference.step(step, before)
        if floor_reference is not None:
            noise, noise_after = floor_reference.step(step, perturb(before))
            checker.check("sfloor", "grad_norm", step, relative(noise["grad_norm"],
                                                                ref["grad_norm"]), big)
            total_d, each = update_differences(noise_after, after)
            checker.check("sfloor", "update", step, total_d, big, "all parameters")
            worst = max((d, n) for n, d in each.items())
            checker.check("sfloor", "updates", step, worst[0], big, worst[1])
        ours = ours_by_step[step]
        checker.check("stepwise", "lr", step, relative(ours["lr"], ref["lr"] * HEAD_LR_FACTOR),
                      args.lr_rtol, "the logged lr, the head's")
        archive, ours_after = checkpoint_tensors(os.path.join(args.run, "checkpoint_%d.pt" % step))
        groups = optimizer_groups(archive)
        counts = sorted(group[-1] for group in groups)
        if counts != sorted([backbone_count, head_count]):
            checker.failures.append("step %d: our parameter groups hold %s tensors, the authors' "
                                    "%d (backbone) and %d (head)" % (step, counts, backbone_count,
                                                                     head_count))
        for i, (group_lr, wd, momentum, dampening, nesterov, n) in enumerate(groups):
            expected = ref["lr"] if n == backbone_count else ref["lr"] * HEAD_LR_FACTOR
            checker.check("stepwise", "lr", step, relative(group_lr, expected), args.lr_rtol,
                          "group %d of %d tensors" % (i, n))
            if (wd, momentum, dampening, nesterov) != (WEIGHT_DECAY, MOMENTUM, 0.0, False):
                checker.failures.append(
                    "step %d: our parameter group %d has weight decay %g, momentum %g, "
                    "dampening %g, nesterov %s; the authors' %g, %g, 0, False (torch.optim.SGD's "
                    "defaults)" % (step, i, wd, momentum, dampening, nesterov, WEIGHT_DECAY,
                                   MOMENTUM))
        checker.values("stepwise", step, ours, ref, args.stepwise_rtol, big or args.grad_rtol)
        # Parameters: the step's update.
        total_d, each = update_differences(ours_after, after)
        checker.check("stepwise", "update", step, total_d, big or args.update_rtol,
                      "all parameters")
        worst_update = (0.0, "")
        for name in params:
            checker.check("stepwise", "updates", step, each[name],
                          big or args.tensor_update_rtol, name)
            worst_update = max(worst_update, (each[name], name))
        for name in names:
            if name.endswith("num_batches_tracked"):
                if int(ours_after[name]) != int(after[name]):
                    checker.failures.append("step %d %s: expected %d, saw %d" % (
                        step, name, int(after[name]), int(ours_after[name])))
            elif "running" in name:  # what the step's forward made of the buffers
                checker.check("stepwise", "buffers", step,
                              tensor_relative(ours_after[name], after[name]), args.stepwise_rtol,
                              name)
        print("step %2d lr %.6e/%.6e loss %.7f (ours %.7f) grad_norm %.6f (ours %.6f) "
              "update %.2e (%s)" % (step, ref["lr"], ref["lr"] * HEAD_LR_FACTOR, ref["loss"],
                                    ours["loss"], ref["grad_norm"], ours["grad_norm"],
                                    worst_update[0], worst_update[1]), flush=True)
        before = ours_after
        ours_states[step] = ours_after

    if args.stepwise_floor:
        for name, rtol in zip(floored, [args.grad_rtol, args.update_rtol,
                                        args.tensor_update_rtol]):
            ours_d = checker.worst[("stepwise", name)][0]
            bound = max(rtol, args.free_factor * checker.worst[("sfloor", name)][0])
            if not ours_d <= bound:
                checker.failures.append(
                    "stepwise %s: ours differs from the reference by %.3g, more than %.3g (%g or "
                    "%g x the stepwise noise floor %.3g)" % (
                        name, ours_d, bound, rtol, args.free_factor,
                        checker.worst[("sfloor", name)][0]))

    # 2. Free running: the reference's own trajectory from the initial weights, against ours,
    # bounded by the noise floor: a second reference run from initial weights moved by one
    # float32 rounding (relative 2^-24).
    def free_run(state):
        run = Reference(peers, state, batch, world, args.base_lr, args.steps)
        return [run.step(step) for step in range(1, args.steps + 1)]

    free, floor = free_run(initial), free_run(perturb(initial))
    for step in range(1, args.steps + 1):
        ref, ref_after = free[step - 1]
        noise, noise_after = floor[step - 1]
        for name in LOSSES + ["loss", "grad_norm"]:
            checker.check("free", name, step, relative(ours_by_step[step][name], ref[name]),
                          float("inf"))
            checker.check("floor", name, step, relative(noise[name], ref[name]), float("inf"))
        for mode, states in [("free", ours_states[step]), ("floor", noise_after)]:
            d = max((tensor_relative(states[n], ref_after[n]), n) for n in params)
            checker.check(mode, "weights", step, d[0], float("inf"), d[1])
    for name in LOSSES + ["loss", "grad_norm", "weights"]:
        ours_d = checker.worst[("free", name)][0]
        floor_d = max(checker.worst[("floor", name)][0], args.floor_min)
        if not ours_d <= args.free_factor * floor_d:
            checker.failures.append("free running %s: ours differs from the reference by %.3g, "
                                    "more than %g x the noise floor %.3g" % (
                                        name, ours_d, args.free_factor, floor_d))

    print("first and last step of the reference: loss %.5f -> %.5f, lr %.4g -> %.4g (backbone)"
          % (free[0][0]["loss"], free[-1][0]["loss"], free[0][0]["lr"], free[-1][0]["lr"]))
    print("max relative differences over %d steps (step; what):" % args.steps)
    for mode in ["stepwise", "sfloor", "free", "floor"]:
        for key in ["lr"] + LOSSES + ["loss", "grad_norm", "update", "updates", "buffers",
                                      "weights"]:
            if (mode, key) in checker.worst:
                d, step, detail = checker.worst[(mode, key)]
                print("  %-8s %-13s %.3g (step %d%s)" % (mode, key, d, step,
                                                          "; " + detail if detail else ""))
    if checker.failures:
        print("FAIL: %d differences beyond tolerance:\n  %s" % (
            len(checker.failures), "\n  ".join(checker.failures[:40])))
        return 1
    print("PASS: %d steps, %d ranks against the reference" % (args.steps, world))
    return 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make_data")
    make.add_argument("--out", required=True)
    make.add_argument("--size", type=int, default=64)
    run = sub.add_parser("compare")
    run.add_argument("--peers", required=True, help="directory of danet_peer.py")
    run.add_argument("--data", required=True)
    run.add_argument("--inputs", required=True, help="trajectory_inputs' output directory")
    run.add_argument("--run", required=True)
    run.add_argument("--chunks", type=int, required=True)
    run.add_argument("--base_lr", type=float, required=True,
                     help="the backbone's lr (group 0); the head's is 10 x")
    run.add_argument("--steps", type=int, required=True, help="also the poly schedule's N")
    run.add_argument("--lr_rtol", type=float, default=1e-12)
    run.add_argument("--stepwise_rtol", type=float, default=1e-5,
                     help="losses and BatchNorm buffers of each step from our weights")
    run.add_argument("--grad_rtol", type=float, default=1e-4,
                     help="gradient norm of each step from our weights")
    run.add_argument("--update_rtol", type=float, default=1e-3,
                     help="the whole update of each step from our weights")
    run.add_argument("--tensor_update_rtol", type=float, default=1e-2,
                     help="each tensor's update of each step from our weights")
    run.add_argument("--free_factor", type=float, default=5.0,
                     help="free-running differences may be this many times the noise floor, "
                     "and with --stepwise_floor the stepwise ones the stepwise floor")
    run.add_argument("--stepwise_floor", action="store_true",
                     help="gradient norm and updates of each step: within the fixed tolerances "
                     "or free_factor x a second reference's from one-rounding-moved weights")
    run.add_argument("--floor_min", type=float, default=1e-6,
                     help="the noise floor is taken as at least this")
    args = parser.parse_args()
    if args.command == "make_data":
        make_data(args.out, args.size)
        return 0
    sys.path.insert(0, args.peers)
    import danet_peer  # noqa: E402
    return compare(args, {"danet_peer": danet_peer})


if __name__ == "__main__":
    sys.exit(main())
