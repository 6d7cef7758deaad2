"""Compares what two profiled training runs execute, operator by operator.

    python3 benchmarks/op_table.py OURS.json PEER.json [--steps=2 --top=25 --shapes]

Both files are Chrome traces in torch.profiler's format: comm_benchmark's --profile_dir (C++,
the Kineto profiler of LibTorch) and ddp_peer.py's --profile_dir (torch.profiler), with the
same number of profiled steps. Prints, per operator name, the calls per step on each side and
the self CPU time per step (an operator's time less that of the operators it calls), sorted by
the larger self time; then, with --shapes, every (operator, input shapes) whose calls per step
differ between the sides. Counts and shapes do not depend on the machine's load; times do.
"""
import argparse
import collections
import json
import sys


def load(path):
    """Returns [(name, shapes, self_us)] of the CPU operators in the trace at `path`."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{path}: not a torch.profiler Chrome trace ({e}); write it with "
                 "comm_benchmark --profile_dir or ddp_peer.py --profile_dir")
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    by_thread = collections.defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    rows = []
    for thread_ops in by_thread.values():
        # Nested operators (e.g. aten::conv2d -> aten::convolution -> ...): self time is the
        # duration less the children's.
        thread_ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack, child_us = [], {}
        for e in thread_ops:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                child_us[id(stack[-1])] = child_us.get(id(stack[-1]), 0) + e["dur"]
            stack.append(e)
        for e in thread_ops:
            dims = e.get("args", {}).get("Input Dims", [])
            shapes = ";".join("x".join(map(str, d)) if isinstance(d, list) else str(d)
                              for d in dims)
            rows.append((e["name"], shapes, e["dur"] - child_us.get(id(e), 0)))
    if not rows:
        sys.exit(f"{path}: no CPU operators in the trace")
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ours")
    parser.add_argument("peer")
    parser.add_argument("--steps", type=int, default=2, help="profiled steps in each file")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--shapes", action="store_true",
                        help="also list (operator, input shapes) whose counts differ")
    args = parser.parse_args()
    sides = [load(args.ours), load(args.peer)]
    count = [collections.Counter(r[0] for r in s) for s in sides]
    self_us = [collections.Counter() for _ in sides]
    for i, s in enumerate(sides):
        for name, _, us in s:
            self_us[i][name] += us
    names = sorted(set(count[0]) | set(count[1]),
                   key=lambda n: -max(self_us[0][n], self_us[1][n]))
    n = args.steps
    print(f"per step ({n} profiled): calls ours / peer, self ms (wall clock) ours / peer")
    print(f"{'operator':<46} {'calls':>13} {'self ms':>17}")
    for name in names[:args.top]:
        print(f"{name[:46]:<46} {count[0][name] / n:6.0f} / {count[1][name] / n:<6.0f}"
              f"{self_us[0][name] / n / 1e3:8.1f} / {self_us[1][name] / n / 1e3:<8.1f}")
    total = [sum(c.values()) / n for c in count]
    total_ms = [sum(c.values()) / n / 1e3 for c in self_us]
    print(f"{'all operators':<46} {total[0]:6.0f} / {total[1]:<6.0f}"
          f"{total_ms[0]:8.1f} / {total_ms[1]:<8.1f}")
    differ = [name for name in names if count[0][name] != count[1][name]]
    print("operators called a different number of times: " +
          (", ".join(f"{name} {count[0][name] / n:.0f}/{count[1][name] / n:.0f}"
                     for name in differ) or "none"))
    if args.shapes:
        keyed = [collections.Counter((r[0], r[1]) for r in s) for s in sides]
        print("\n(operator, input shapes) with different calls per step, ours / peer:")
        for key in sorted(set(keyed[0]) | set(keyed[1])):
            if keyed[0][key] != keyed[1][key]:
                print(f"  {key[0]} [{key[1]}] {keyed[0][key] / n:.0f} / {keyed[1][key] / n:.0f}")


if __name__ == "__main__":
    main()
