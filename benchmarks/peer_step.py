"""What the Python peers of the training-step benchmarks share (benchmarks/dbnet_peer.py,
benchmarks/danet_peer.py), as models/testing/step_benchmark.h does for ours: per-phase timing
without synchronising the device inside the steps, the count of host-device synchronisations,
the caching allocator's peaks, the profile of the operations that took the most time, and the
trainer's parameter groups. The "summary:" line's keys are the same on both sides."""
import collections
import contextlib
import time
import warnings

import torch
import torch.nn as nn


def param_groups(model, weight_decay):
    """Weight decay off norm weights and all biases, as core/param_groups.h splits them."""
    decay, no_decay = [], []
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            norm = isinstance(module, nn.modules.batchnorm._NormBase)
            (no_decay if norm or name == "bias" else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


class PhaseTimer:
    """Time of each phase of a step: CUDA events on the current stream, read after the loop (no
    synchronisation inside the steps), or the wall clock on the CPU."""

    def __init__(self, device, phases):
        self.cuda = device.type == "cuda"
        self.phases = phases
        self.marks = []

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def mean_ms(self):
        if self.cuda and self.marks:
            self.marks[-1].synchronize()
        per_step = self.phases + 1
        steps = len(self.marks) // per_step
        sums = [0.0] * self.phases
        for s in range(steps):
            for p in range(self.phases):
                a, b = self.marks[s * per_step + p], self.marks[s * per_step + p + 1]
                sums[p] += a.elapsed_time(b) if self.cuda else (b - a) * 1000
        return [x / max(steps, 1) for x in sums]


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sync_site(filename, lineno):
    """The Python line a synchronisation warning points at, as "package/module.py:line" (the
    last three path components): torchvision's or this peer's line that called the operator,
    or the line that called backward() for a warning the autograd engine replays after it."""
    return "/".join(filename.split("/")[-3:]) + f":{lineno}"


@contextlib.contextmanager
def count_syncs(device):
    """Counts host-device synchronisations of CUDA work inside the block (CUDA's sync debug mode
    in "warn", each warning counted, as SyncCounter does for ours); yields a list whose first
    element is the count when the block ends and whose second is a Counter of the count per
    call site (sync_site). Counts nothing on the CPU."""
    counted = [0, collections.Counter()]
    if device.type != "cuda":
        yield counted
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield counted
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchronizing CUDA operation" in str(w.message):
            counted[0] += 1
            counted[1][sync_site(w.filename, w.lineno)] += 1


def memory_summary(device):
    if device.type != "cuda":
        return ""
    return (f" peak_allocated_mib={torch.cuda.max_memory_allocated(device) / 2**20:g}"
            f" peak_reserved_mib={torch.cuda.max_memory_reserved(device) / 2**20:g}")


def profile(device, steps, step_ms, step):
    """The operations that took the most device time, aggregated from the same Kineto events as
    the C++ side: kernels and copies on a GPU, operators (inclusive) on the CPU."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        synchronize(device)
    kinds = torch.autograd.DeviceType
    wanted = kinds.CUDA if device.type == "cuda" else kinds.CPU
    ms_by_name = collections.Counter()
    for event in prof.profiler.kineto_results.events():
        if event.device_type() == wanted:
            ms_by_name[event.name()] += event.duration_ns() / 1e6 / steps
    busy = sum(ms_by_name.values())
    if device.type == "cuda":
        print(f"profile: device busy {busy:.1f} ms of a {step_ms:.1f} ms step "
              f"({100 * busy / step_ms:.0f}%); top kernels, ms per step:")
    else:
        print("profile: top operators, ms per step including the operators they call:")
    for name, ms in ms_by_name.most_common(10):
        print(f"  {ms:8.2f}  {name[:110]}")


def report_steps(device, amp, images_per_second, ms, scaler, sync_steps, profile_steps, step_ms,
                 step, optimizer=True):
    """Counts the synchronisations of sync_steps more calls of step (CUDA), prints the
    "summary:" line, a "sync site:" line per call site that synchronised, and then, with
    profile_steps, the profile: ReportSteps of
    models/testing/step_benchmark.h, key for key."""
    with count_syncs(device) as syncs:
        for _ in range(sync_steps):
            step()
    summary = (f"summary: device={device} amp={amp} images/s={images_per_second:g} "
               f"forward_ms={ms[0]:g} backward_ms={ms[1]:g}")
    if optimizer:
        summary += f" optimizer_ms={ms[2]:g}"
    if scaler.is_enabled():
        summary += f" loss_scale={scaler.get_scale():g}"
    if device.type == "cuda" and sync_steps > 0:
        summary += f" syncs_per_step={syncs[0] / sync_steps:g}"
    summary += memory_summary(device)
    print(summary)
    for site, count in syncs[1].most_common():
        print(f"sync site: {count / sync_steps:g} per step: {site}")
    print(end="", flush=True)
    if profile_steps > 0:
        try:
            profile(device, profile_steps, step_ms, step)
        except Exception as e:  # the timed figures are out already
            print(f"profile: failed: {e}")
