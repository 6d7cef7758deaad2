"""Statistics shared by the side-by-side benchmarks (comm_vs_ddp.sh, comm_two_nodes.sh,
dbnet_step.sh, danet_step.sh, optimizer_step.sh).

medians() reads the "<config> world 2 <ms> ms/step ... cpu <ms> ms/step ... faults <n>/step"
lines that comm_benchmark and ddp_peer.py print; spread() summarises per-round ratios ours/peer
of interleaved rounds (each ratio taken within one round, so that both sides saw the same load).
"""
import random
import re
import statistics


def medians(path, cpu=False, faults=False):
    """Median per configuration of a file's ms/step (or CPU ms/step, or page faults/step)."""
    runs = {}
    for line in open(path):
        m = re.match(r"(\S+)\s+world \d+ +([\d.]+) ms/step", line)
        c = re.search(r"cpu ([\d.]+) ms/step", line)
        f = re.search(r"faults (\d+)/step", line)
        if m and (c or not cpu) and (f or not faults):
            value = f.group(1) if faults else c.group(1) if cpu else m.group(2)
            runs.setdefault(m.group(1), []).append(float(value))
    return {k: statistics.median(v) for k, v in runs.items()}


def spread(ratios):
    """Median of per-round ratios, their min and max, and a bootstrap 90% interval of the
    median (2000 resamples, fixed seed), as one line."""
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return (f"{statistics.median(ratios):5.2f}  min-max {min(ratios):.2f}-{max(ratios):.2f}  "
            f"90% {boot[100]:.2f}-{boot[1899]:.2f}")


def step_table(rounds, rows):
    """Prints one line per row of a step benchmark's interleaved rounds: the medians over rounds
    of two columns and the spread of their per-round ratio. `rounds` are comma-separated step
    times (one string per round, as the scripts pass them); `rows` are (name, ours column,
    peer column, note)."""
    rounds = [list(map(float, r.split(","))) for r in rounds]
    print("median step (s) over rounds     ours   python   ours/python per round: median, spread")
    for name, a, b, note in rows:
        ours = statistics.median(r[a] for r in rounds)
        peer = statistics.median(r[b] for r in rounds)
        print(f"{name:28s} {ours:7.3f}  {peer:7.3f}   {spread([r[a] / r[b] for r in rounds])}  "
              f"{note}")
