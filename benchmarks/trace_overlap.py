"""Reads per-rank timelines (Chrome Trace Event Format, written by core/trace.h) and prints,
per file, how much of the gradient collectives' time overlapped backward:

  python3 benchmarks/trace_overlap.py <trace_rank0.json> [more.json ...]

For each traced step: the union of the "bucket <k> allreduce" spans (launch to completion; on
the GPU the "bucket <k> allreduce (cuda)" spans, the device's start to end), and
the part of it that lies inside the step's "backward" span; the hidden share is their ratio.
It also prints, per bucket, the mean time from ready to launch and from launch to completion,
and the order buckets became ready in against the order they were launched in.

  python3 benchmarks/trace_overlap.py --none=<none trace> --allreduce=<allreduce trace> <traces>

adds the benchmark's definition computed from traces: 1 - (step - none step) / (the allreduce
strategy's finish_backward, i.e. the collectives run after backward), with medians over the
traced steps. The overlap share above says how much of the collectives' wall time lay inside
backward; this one how much of their cost did not reach the step time. They agree when the
collectives take no CPU from backward (a slow wire); where both ranks' cores are saturated
(two ranks on two cores, loopback), a collective inside backward still slows backward down,
and the overlap share is an upper bound of the hidden share.
"""
import json
import statistics
import sys


def union_length(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def clip(intervals, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]


def analyse(path):
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "step")
    rows = []
    per_bucket = {}
    for lo, hi in steps:
        inside = [e for e in events if lo <= e["ts"] < hi]
        spans = {}
        for e in inside:
            spans.setdefault(e["name"], []).append((e["ts"], e["ts"] + e["dur"]))
        comm = [iv for name, ivs in spans.items()
                if name.startswith("bucket ") and name.removesuffix(" (cuda)").endswith(
                    ("allreduce", "allgather"))
                for iv in ivs]
        backward = spans.get("backward", [(lo, lo)])[0]
        total = union_length(comm)
        hidden = union_length(clip(comm, *backward))
        ready = sorted((ivs[0][1], name.split()[1]) for name, ivs in spans.items()
                       if name.endswith(" ready"))
        launch = sorted((ivs[0][0], name.split()[1]) for name, ivs in spans.items()
                        if name.endswith(" launch"))
        for name, ivs in spans.items():
            if name.endswith(" launch"):
                b = name.split()[1]
                ready_end = spans.get(f"bucket {b} ready", [(None, ivs[0][0])])[0][1]
                # On the GPU the span is the device's ("... (cuda)", from CUDA events).
                done = spans.get(f"bucket {b} allreduce",
                                 spans.get(f"bucket {b} allreduce (cuda)",
                                           [(None, ivs[0][1])]))[0][1]
                per_bucket.setdefault(int(b), []).append(
                    (ivs[0][0] - ready_end, ivs[0][1] - ivs[0][0], done - ivs[0][0]))
        rows.append(dict(step=(hi - lo) / 1e3, backward=(backward[1] - backward[0]) / 1e3,
                         comm=total / 1e3, hidden=hidden / 1e3,
                         finish=sum(b - a for a, b in spans.get("finish_backward", [])) / 1e3,
                         ready=[b for _, b in ready], launch=[b for _, b in launch]))
    return rows, per_bucket


def main():
    options = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    baseline = {}
    for key in ("none", "allreduce"):
        if key in options:
            rows, _ = analyse(options[key])
            baseline[key] = statistics.median(
                r["step"] if key == "none" else r["finish"] for r in rows)
    for path in [a for a in sys.argv[1:] if not a.startswith("--")]:
        rows, per_bucket = analyse(path)
        print(f"{path}: {len(rows)} traced steps")
        if not rows:
            continue
        med = lambda key: statistics.median(r[key] for r in rows)
        comm, hidden = med("comm"), med("hidden")
        share = sum(r["hidden"] for r in rows) / max(sum(r["comm"] for r in rows), 1e-9)
        print(f"  median ms: step {med('step'):.1f}  backward {med('backward'):.1f}  "
              f"finish_backward {med('finish'):.1f}  collectives (union) {comm:.1f}  "
              f"of which inside backward {hidden:.1f}")
        print(f"  hidden share (collective time inside backward / collective time): "
              f"{share * 100:.0f}%")
        if len(baseline) == 2 and baseline["allreduce"] > 0:
            hidden = 1 - (med("step") - baseline["none"]) / baseline["allreduce"]
            print(f"  hidden share as the benchmark defines it, from traces: "
                  f"1 - ({med('step'):.1f} - {baseline['none']:.1f}) / "
                  f"{baseline['allreduce']:.1f} = {min(1.0, max(0.0, hidden)) * 100:.0f}%")
        print(f"  buckets ready in order  {rows[-1]['ready']}")
        print(f"  buckets launched in     {rows[-1]['launch']}")
        for b in sorted(per_bucket):
            delay, launch, run = (statistics.median(x) / 1e3 for x in zip(*per_bucket[b]))
            print(f"  bucket {b}: ready->launch {delay:.2f} ms, launch call {launch:.2f} ms, "
                  f"launch->complete {run:.2f} ms")


if __name__ == "__main__":
    main()
