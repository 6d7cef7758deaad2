"""The Python side of models/danet/trajectory_test.sh: the DANet authors' training loop
(junfu1115/DANet c7a2f60, "[D18]" in models/danet/RECIPE.md), run from our trainer's initial
weights on the same batches, and compared with the trainer's run step by step.

  make_data --out DIR [--size 64]
      writes a tiny Cityscapes-layout dataset (PNG, so that OpenCV decodes the same pixels on
      both sides): 4 training images (city "aachen") and 1 validation image ("frankfurt"), S x S,
      with rectangles of a few classes on noise, each class its own colour, and unlabeled
      (label id 0, train id 255: ignored) pixels among them; label maps of official label ids.
  compare --common DIR --peers DIR --data DIR --inputs INPUTS_DIR --run RUN_DIR --chunks N
          --base_lr LR --steps K [--tolerances ...]
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
Float32 throughout, on the CPU, one thread. What the trajectory tests' references share
(reading checkpoints, the optimizer's groups and metrics.jsonl, relative differences, the
Checker, the one-rounding perturbation, update differences) is models/testing/
trajectory_common.py, imported from the directory --common names.
"""
import argparse
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


def load_our_batch(common, path, order):
    archive = common.load_archive(path)
    return {"image": common.archive_tensor(archive, "images")[order].float().contiguous(),
            "label": common.archive_tensor(archive, "semantic")[order].long()}


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


def check_values(checker, common, mode, step, ours, ref, rtol, grad_rtol):
    """The three loss terms, the total loss and the gradient norm of a step, ours against `ref`."""
    for name in LOSSES + ["loss", "grad_norm"]:
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
    checker = common.Checker()
    checker.failures += compare_inputs(batch, load_their_batch(args.data, order))
    print("reference: %d images of %dx%d, %d ranks of %d; %d ignored pixels"
          % (global_batch, batch["image"].shape[2], batch["image"].shape[3], world,
             global_batch // world, int((batch["label"] == IGNORE).sum())))

    _, initial = common.checkpoint_tensors(os.path.join(args.inputs, "checkpoint_0.pt"))
    model = build_model(peers)
    names = sorted(model.state_dict())
    if sorted(initial) != names:
        sys.exit("FAIL: parameter names differ between our checkpoint and the reference: %s"
                 % sorted(set(initial) ^ set(names)))
    backbone_count = len(list(model.backbone.parameters()))
    head_count = len(list(model.head.parameters()))
    ours_by_step = common.read_metrics(args.run, args.steps)

    # 1. Step by step: every reference step starts from our weights and BatchNorm buffers after
    # the previous step (its momentum is its own), so float rounding cannot accumulate and the
    # checks are tight: lr of every group, losses, gradient norm, the update of every tensor.
    reference = Reference(peers, initial, batch, world, args.base_lr, args.steps)
    # One generator for every one-rounding perturbation (common.perturb): the stepwise floor's,
    # then the free-running floor's start.
    generator = torch.Generator().manual_seed(0)

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

    for step in range(1, args.steps + 1):
        ref, after = reference.step(step, before)
        if floor_reference is not None:
            noise, noise_after = floor_reference.step(step, common.perturb(before, generator))
            checker.check("sfloor", "grad_norm", step, common.relative(noise["grad_norm"],
                                                                       ref["grad_norm"]), big)
            total_d, each = common.update_differences(before, noise_after, after, params)
            checker.check("sfloor", "update", step, total_d, big, "all parameters")
            worst = max((d, n) for n, d in each.items())
            checker.check("sfloor", "updates", step, worst[0], big, worst[1])
        ours = ours_by_step[step]
        checker.check("stepwise", "lr", step,
                      common.relative(ours["lr"], ref["lr"] * HEAD_LR_FACTOR), args.lr_rtol,
                      "the logged lr, the head's")
        archive, ours_after = common.checkpoint_tensors(
            os.path.join(args.run, "checkpoint_%d.pt" % step))
        groups = common.optimizer_groups(archive)
        counts = sorted(g["params"] for g in groups)
        if counts != sorted([backbone_count, head_count]):
            checker.fail("step %d: our parameter groups hold %s tensors, the authors' %d "
                         "(backbone) and %d (head)" % (step, counts, backbone_count, head_count))
        for i, g in enumerate(groups):
            n = g["params"]
            expected = ref["lr"] if n == backbone_count else ref["lr"] * HEAD_LR_FACTOR
            checker.check("stepwise", "lr", step, common.relative(g["lr"], expected),
                          args.lr_rtol, "group %d of %d tensors" % (i, n))
            seen = (g.get("weight_decay"), g.get("momentum"), g.get("dampening"), g.get("nesterov"))
            if seen != (WEIGHT_DECAY, MOMENTUM, 0.0, False):
                checker.fail("step %d: our parameter group %d has weight decay, momentum, "
                             "dampening, nesterov %s; the authors' %s (torch.optim.SGD's "
                             "defaults)" % (step, i, seen, (WEIGHT_DECAY, MOMENTUM, 0.0, False)))
        check_values(checker, common, "stepwise", step, ours, ref, args.stepwise_rtol,
                     big or args.grad_rtol)
        # Parameters: the step's update.
        total_d, each = common.update_differences(before, ours_after, after, params)
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
                    checker.fail("step %d %s: expected %d, saw %d" % (
                        step, name, int(after[name]), int(ours_after[name])))
            elif "running" in name:  # what the step's forward made of the buffers
                checker.check("stepwise", "buffers", step,
                              common.tensor_relative(ours_after[name], after[name]),
                              args.stepwise_rtol, name)
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
                checker.fail(
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

    free, floor = free_run(initial), free_run(common.perturb(initial, generator))
    for step in range(1, args.steps + 1):
        ref, ref_after = free[step - 1]
        noise, noise_after = floor[step - 1]
        for name in LOSSES + ["loss", "grad_norm"]:
            checker.check("free", name, step,
                          common.relative(ours_by_step[step][name], ref[name]), float("inf"))
            checker.check("floor", name, step, common.relative(noise[name], ref[name]),
                          float("inf"))
        for mode, states in [("free", ours_states[step]), ("floor", noise_after)]:
            d = max((common.tensor_relative(states[n], ref_after[n]), n) for n in params)
            checker.check(mode, "weights", step, d[0], float("inf"), d[1])
    checker.within_floor(LOSSES + ["loss", "grad_norm", "weights"], args.free_factor,
                         args.floor_min)

    print("first and last step of the reference: loss %.5f -> %.5f, lr %.4g -> %.4g (backbone)"
          % (free[0][0]["loss"], free[-1][0]["loss"], free[0][0]["lr"], free[-1][0]["lr"]))
    checker.report(args.steps, ["stepwise", "sfloor", "free", "floor"],
                   ["lr"] + LOSSES + ["loss", "grad_norm", "update", "updates", "buffers",
                                      "weights"])
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
    common.add_compare_arguments(run)  # --steps is also the poly schedule's N
    run.add_argument("--peers", required=True, help="directory of danet_peer.py")
    run.add_argument("--data", required=True)
    run.add_argument("--base_lr", type=float, required=True,
                     help="the backbone's lr (group 0); the head's is 10 x")
    run.add_argument("--stepwise_rtol", type=float, default=1e-5,
                     help="losses and BatchNorm buffers of each step from our weights")
    run.add_argument("--grad_rtol", type=float, default=1e-4,
                     help="gradient norm of each step from our weights")
    run.add_argument("--update_rtol", type=float, default=1e-3,
                     help="the whole update of each step from our weights")
    run.add_argument("--tensor_update_rtol", type=float, default=1e-2,
                     help="each tensor's update of each step from our weights")
    run.add_argument("--stepwise_floor", action="store_true",
                     help="gradient norm and updates of each step: within the fixed tolerances "
                     "or free_factor x a second reference's from one-rounding-moved weights")
    args = parser.parse_args()
    sys.path.insert(0, args.peers)
    import danet_peer  # noqa: E402
    return compare(args, {"danet_peer": danet_peer}, common)


if __name__ == "__main__":
    sys.exit(main())
