"""Checks that two training runs of the same config gave the same result, bit for bit.

Usage: python3 compare_training_runs.py [--resumed] <output_dir A> <output_dir B> <step>
Compares every logged metric of metrics.jsonl except wall-clock measurements (losses, gradient
norms, learning rates, evaluation metrics: exactly, as the JSON doubles they were written as)
and every parameter and buffer of the model in checkpoint_<step>.pt (torch.equal). The
optimizer's state is left out: LibTorch keys it by tensor address, which differs per process.
With --resumed, B may have been interrupted and resumed from a checkpoint: the steps it
trained again after the resume appear twice in its metrics.jsonl, and the last record of each
step and kind (training scalars, evaluation) is the one compared.
Run with the venv python (tools/setup.sh), whose torch loads LibTorch's checkpoint archives.
"""

import json
import os
import sys

import torch

# Fields that measure the machine, not the training.
WALL_CLOCK = {"time", "data_wait_fraction", "images_per_second"}


def metrics(run_dir, resumed=False):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    records = [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in records]
    if resumed:
        # A record logged again after a resume replaces the one logged before the interruption.
        last = {}
        for r in records:
            last[(r.get("step"), tuple(sorted(r)))] = r
        records = sorted(last.values(), key=lambda r: r.get("step", -1))
    return records


def model_tensors(run_dir, step):
    archive = torch.jit.load(os.path.join(run_dir, "checkpoint_%d.pt" % step), map_location="cpu")
    tensors = dict(archive.model.named_parameters())
    tensors.update(archive.model.named_buffers())
    return tensors


def main(a, b, step, resumed=False):
    failures = []
    metrics_a, metrics_b = metrics(a, resumed), metrics(b, resumed)
    if not any(r.get("step") == step and "loss" in r for r in metrics_a):
        failures.append("%s: no loss logged at step %d" % (a, step))
    if metrics_a != metrics_b:
        for ra, rb in zip(metrics_a, metrics_b):
            if ra != rb:
                failures.append("metrics differ:\n  %s\n  %s" % (ra, rb))
        if len(metrics_a) != len(metrics_b):
            failures.append("%d vs %d metrics records" % (len(metrics_a), len(metrics_b)))
    tensors_a, tensors_b = model_tensors(a, step), model_tensors(b, step)
    if not tensors_a:
        failures.append("%s: the checkpoint holds no model tensors" % a)
    if sorted(tensors_a) != sorted(tensors_b):
        failures.append("model tensor names differ: %s" % sorted(set(tensors_a) ^ set(tensors_b)))
    for name in sorted(set(tensors_a) & set(tensors_b)):
        if not torch.equal(tensors_a[name], tensors_b[name]):
            diff = (tensors_a[name].double() - tensors_b[name].double()).abs().max().item()
            failures.append("%s differs (max abs difference %g)" % (name, diff))
    if failures:
        print("FAIL: %s and %s differ\n%s" % (a, b, "\n".join(failures)))
        return 1
    print("same: %d metrics records, %d model tensors" % (len(metrics_a), len(tensors_a)))
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    resumed = "--resumed" in args
    args = [x for x in args if x != "--resumed"]
    if len(args) != 3:
        sys.exit(__doc__)
    sys.exit(main(args[0], args[1], int(args[2]), resumed))
