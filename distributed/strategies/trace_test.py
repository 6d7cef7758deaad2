"""Checks the timelines comm_benchmark wrote (core/trace.h): each parses as the Chrome Trace
Event Format and holds, per rank and traced step, the step's phases and every bucket's ready,
launch and all-reduce spans, in a consistent order.

  trace_test.py <trace dir> <traced steps>
"""
import collections
import json
import os
import re
import sys

directory, steps = sys.argv[1], int(sys.argv[2])
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def load(name):
    path = os.path.join(directory, name)
    with open(path) as f:
        trace = json.load(f)  # Must be valid JSON.
    check(isinstance(trace.get("traceEvents"), list), f"{name}: no traceEvents list")
    return trace["traceEvents"]


for strategy in ("bucketed", "allreduce"):
    per_rank_buckets = []
    for rank in (0, 1):
        name = f"{strategy}_world2_trace_rank{rank}.json"
        events = load(name)
        spans = [e for e in events if e.get("ph") == "X"]
        for e in spans:
            for key in ("ph", "ts", "dur", "pid", "tid", "name"):
                check(key in e, f"{name}: event {e} lacks {key}")
            check(isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0,
                  f"{name}: bad ts/dur in {e}")
            check(e["pid"] == rank, f"{name}: pid {e['pid']} is not the rank {rank}")
        meta = [e for e in events if e.get("ph") == "M"]
        check(any(e["name"] == "process_name" and e["args"]["name"] == f"rank {rank}"
                  for e in meta), f"{name}: no process_name 'rank {rank}'")
        lanes = {e["tid"] for e in meta if e["name"] == "thread_name"}
        check({e["tid"] for e in spans} <= lanes, f"{name}: a span's lane has no thread_name")
        count = collections.Counter(e["name"] for e in spans)
        for phase in ("step", "forward", "backward", "finish_backward", "optimizer"):
            check(count[phase] == steps, f"{name}: {count[phase]} '{phase}' spans, want {steps}")
        buckets = sorted({int(m.group(1)) for e in spans
                          for m in [re.match(r"bucket (\d+) ready$", e["name"])] if m})
        per_rank_buckets.append(buckets)
        check(buckets == list(range(len(buckets))) and buckets, f"{name}: buckets {buckets}")
        if strategy == "allreduce":
            check(len(buckets) == 1, f"{name}: allreduce has one flat bucket, got {buckets}")
        by_name = collections.defaultdict(list)
        for e in spans:
            by_name[e["name"]].append(e)
        steps_spans = sorted(by_name["step"], key=lambda e: e["ts"])
        backward = sorted(by_name["backward"], key=lambda e: e["ts"])
        for b in buckets:
            for what in ("ready", "launch", "allreduce"):
                check(len(by_name[f"bucket {b} {what}"]) == steps,
                      f"{name}: {len(by_name[f'bucket {b} {what}'])} 'bucket {b} {what}', "
                      f"want {steps}")
            check(len(by_name[f"wait bucket {b}"]) == steps, f"{name}: 'wait bucket {b}' count")
            ready = sorted(by_name[f"bucket {b} ready"], key=lambda e: e["ts"])
            launch = sorted(by_name[f"bucket {b} launch"], key=lambda e: e["ts"])
            reduce = sorted(by_name[f"bucket {b} allreduce"], key=lambda e: e["ts"])
            for i in range(min(len(ready), len(launch), len(reduce), len(steps_spans))):
                step = steps_spans[i]
                check(step["ts"] <= ready[i]["ts"] and
                      ready[i]["ts"] + ready[i]["dur"] <= launch[i]["ts"] + 1,
                      f"{name}: bucket {b} step {i}: launched before it was ready")
                check(reduce[i]["ts"] == launch[i]["ts"],
                      f"{name}: bucket {b} step {i}: the all-reduce span starts at its launch")
                check(reduce[i]["ts"] + reduce[i]["dur"] <= step["ts"] + step["dur"],
                      f"{name}: bucket {b} step {i}: completes after its step ended")
                if strategy == "allreduce":
                    # Launched after backward, in finish_backward.
                    check(launch[i]["ts"] >= backward[i]["ts"] + backward[i]["dur"],
                          f"{name}: allreduce launched inside backward")
                elif b == 0:
                    # The first bucket of the bucketed strategy is launched during backward.
                    check(launch[i]["ts"] < backward[i]["ts"] + backward[i]["dur"],
                          f"{name}: bucketed bucket 0 not launched during backward")
    check(per_rank_buckets[0] == per_rank_buckets[1], f"{strategy}: ranks' buckets differ")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("traces OK")
