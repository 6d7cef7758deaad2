"""What the Python references of the recipe trajectory tests share
(models/{dbnet,danet,mask_rcnn}/trajectory_reference.py; each keeps its model, its losses, its
schedule and what only it checks):

  - reading what the trainer and //models/<model>:trajectory_inputs wrote: checkpoints
    (torch::serialize archives: "model", "optimizer", "rng/cpu"), the optimizer's parameter
    groups, metrics.jsonl, and the inputs' batch archive;
  - the comparison: relative differences, a Checker that keeps the worst figure per (mode,
    quantity) and the failures, the one-float32-rounding perturbation the noise floors start
    from, the update differences of a step, the free-running bound, and the closing report
    whose last line is "PASS: <K> steps, <N> ranks against the reference" (the test scripts grep
    for it) or "FAIL: ..." with every difference beyond its tolerance.

Imported by path: the test passes this directory to the reference (--common).
"""
import json
import math
import os
import sys

import torch

# One float32 rounding, relative: what the noise floors move their starting weights by.
ONE_ROUNDING = 2.0 ** -24


def relative(a, b):
    """|a - b| / |b| (b zero: |a - b| / 1e-30)."""
    return abs(a - b) / max(abs(b), 1e-30)


def tensor_relative(ours, ref):
    """||ours - ref|| / ||ref|| in float64 (ref all zero: ||ours - ref||)."""
    diff = (ours.double() - ref.double()).norm().item()
    scale = ref.double().norm().item()
    return diff / scale if scale > 0 else diff


def load_archive(path):
    """A torch::serialize::OutputArchive file (checkpoint or batch) as a scripted module."""
    return torch.jit.load(path, map_location="cpu")


def archive_tensor(archive, key, default=None):
    """The tensor written as `key` (keys may hold '/', e.g. "rng/cpu"); `default` if absent."""
    try:
        return getattr(archive, key).detach()
    except AttributeError:
        if default is not None:
            return default
        raise SystemExit("FAIL: the archive has no '%s'" % key)


def checkpoint_tensors(path, rename=lambda name: name):
    """(archive, {renamed key: tensor}) of a checkpoint's model: parameters and buffers."""
    archive = load_archive(path)
    tensors = {rename(k): v.detach().clone() for k, v in archive.model.named_parameters()}
    tensors.update({rename(k): v.detach().clone() for k, v in archive.model.named_buffers()})
    return archive, tensors


def rng_state(archive):
    """The default CPU generator's state the checkpoint saved (engine/checkpoint.cc), in the
    layout torch.get_rng_state() returns (both are CPUGeneratorImpl::get_state)."""
    return archive_tensor(archive, "rng/cpu").clone()


def optimizer_groups(archive):
    """Each parameter group of a LibTorch optimizer's archive (torch::optim::Optimizer::save:
    submodules "param_groups/<i>" of optimizer.param_groups, each with its "options" and
    "params/size") as a dict: lr, weight_decay, momentum, dampening, nesterov (those the
    options have) and params (the number of tensors). An archive without groups is an error:
    the checks on them would pass vacuously."""
    groups = []
    for _, group in archive.optimizer.param_groups.named_children():
        options = group.options
        entry = {"params": int(getattr(group, "params/size"))}
        for name in ["lr", "weight_decay", "momentum", "dampening"]:
            if hasattr(options, name):
                entry[name] = float(getattr(options, name))
        if hasattr(options, "nesterov"):
            entry["nesterov"] = bool(options.nesterov)
        groups.append(entry)
    if not groups:
        raise SystemExit("FAIL: our checkpoint's optimizer archive has no parameter groups: the "
                         "per-group lr and weight decay checks would check nothing")
    return groups


def read_metrics(run_dir, steps):
    """metrics.jsonl's step records {step: record}; exits with FAIL when a step 1..steps lacks a
    record or a checkpoint_<step>.pt."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        by_step = {r["step"]: r for r in map(json.loads, f) if "loss" in r}
    missing = [k for k in range(1, steps + 1) if k not in by_step or not
               os.path.exists(os.path.join(run_dir, "checkpoint_%d.pt" % k))]
    if missing:
        sys.exit("FAIL: steps %s lack a metrics.jsonl record or a checkpoint in %s" % (missing,
                                                                                       run_dir))
    return by_step


def rank_rows(global_batch, world):
    """The rows of the global batch (dataset order) each rank's first batch holds: the trainer's
    distributed sampler without shuffling gives rank r the samples r, r + N, r + 2N, ..."""
    return [list(range(r, global_batch, world)) for r in range(world)]


def perturb(state, generator):
    """`state` with every floating tensor moved by one float32 rounding (relative 2^-24, sign at
    random per element, some elements unmoved): the start of a noise-floor run."""
    return {k: (v * (1 + ONE_ROUNDING * torch.randint(-1, 2, v.shape, generator=generator))
                if v.is_floating_point() else v) for k, v in state.items()}


def update_differences(before, other_after, ref_after, params):
    """||other update - ref update|| / ||ref update|| over all `params`, and per tensor (a tensor
    whose reference update is zero up to rounding measured against 1e-4 of the whole)."""
    ref_update = {n: ref_after[n].double() - before[n].double() for n in params}
    other_update = {n: other_after[n].double() - before[n].double() for n in params}
    total = math.sqrt(sum(u.pow(2).sum().item() for u in ref_update.values()))
    total_diff = math.sqrt(sum((other_update[n] - ref_update[n]).pow(2).sum().item()
                               for n in params))
    each = {n: (other_update[n] - ref_update[n]).norm().item() / max(
        ref_update[n].norm().item(), 1e-4 * total) for n in params}
    return total_diff / max(total, 1e-30), each


class Checker:
    """Keeps the worst difference per (mode, quantity), with its step and a detail, and a
    failure line for every check beyond its tolerance."""

    def __init__(self):
        self.failures, self.worst = [], {}

    def check(self, mode, quantity, step, d, rtol, detail=""):
        key = (mode, quantity)
        if d > self.worst.get(key, (-1, 0, ""))[0]:
            self.worst[key] = (d, step, detail)
        if not d <= rtol:  # also catches NaN
            self.failures.append("%s step %d %s: relative difference %.3g > %.3g%s"
                                 % (mode, step, quantity, d, rtol, detail and " (" + detail + ")"))

    def fail(self, message):
        self.failures.append(message)

    def within_floor(self, names, factor, floor_min, mode="free", floor="floor"):
        """Ours may stray from the reference only as far as a one-rounding change of the start
        sends the reference itself, with a margin: worst (mode) <= factor x worst (floor), the
        floor taken as at least floor_min."""
        for name in names:
            ours_d = self.worst[(mode, name)][0]
            floor_d = max(self.worst[(floor, name)][0], floor_min)
            if not ours_d <= factor * floor_d:
                self.fail("%s %s: ours differs from the reference by %.3g, more than %g x the "
                          "noise floor %.3g" % ("free running" if mode == "free" else mode, name,
                                                ours_d, factor, floor_d))

    def report(self, steps, modes, keys):
        print("max relative differences over %d steps (step; what):" % steps)
        for mode in modes:
            for key in keys:
                if (mode, key) in self.worst:
                    d, step, detail = self.worst[(mode, key)]
                    print("  %-8s %-16s %.3g (step %d%s)" % (mode, key, d, step,
                                                              "; " + detail if detail else ""))

    def finish(self, steps, world):
        """The closing line; returns the exit status."""
        if self.failures:
            print("FAIL: %d differences beyond tolerance:\n  %s" % (
                len(self.failures), "\n  ".join(self.failures[:40])))
            return 1
        print("PASS: %d steps, %d ranks against the reference" % (steps, world))
        return 0


def add_compare_arguments(parser):
    """The compare subcommand's arguments every reference takes."""
    parser.add_argument("--inputs", required=True, help="trajectory_inputs' output directory")
    parser.add_argument("--run", required=True, help="the trainer's checkpoint.output_dir")
    parser.add_argument("--chunks", type=int, required=True,
                        help="processes of the run: the reference emulates as many ranks")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--lr_rtol", type=float, default=1e-12)
    parser.add_argument("--free_factor", type=float, default=5.0,
                        help="free-running differences may be this many times the noise floor")
    parser.add_argument("--floor_min", type=float, default=1e-6,
                        help="the noise floor is taken as at least this")
