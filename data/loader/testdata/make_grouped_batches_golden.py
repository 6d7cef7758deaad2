"""Regenerates grouped_batches_golden.txt for aspect_ratio_groups_test: the groups and batches of
torchvision's detection reference's aspect-ratio grouping (references/detection/
group_by_aspect_ratio.py: create_aspect_ratio_groups(dataset, k) and
GroupedBatchSampler(sampler, group_ids, batch_size)) for given image sizes and sampler orders, so
that the test can hold data/loader/aspect_ratio_groups.h to them.

The torchvision wheel does not ship references/, so this script carries its own rewrite of the two
functions, written from their source (pytorch/vision d2aeec2, the version read for this) and
sharing nothing with the C++ code under test; the points that decide batches are kept as
torchvision has them: the bins are 2 ** np.linspace(-1, 1, 2k + 1) (or [1.0] for k = 0) and a
group is bisect.bisect_right of width / height; the buffers live in a defaultdict, which after a
full batch deletes the group's key and makes it again at once (the `assert len(...)` that
follows reads it), so it moves to the end of the dict's order; at the end the buffers are sorted
by length, longest first (a stable sort: ties in dict order), and completed with the group's
samples from its first on, repeated as needed (_repeat_to_at_least), until there are
len(sampler) // batch_size batches.

With --reference=<path to their group_by_aspect_ratio.py> (e.g. `git -C vision show
d2aeec2:references/detection/group_by_aspect_ratio.py > /tmp/group_by_aspect_ratio.py`), their
create_aspect_ratio_groups (over a dataset with get_height_and_width, their fast path) and
GroupedBatchSampler are run too and every case must agree with the rewrite before anything is
written. Nothing of theirs is stored in this repository. Needs the project's venv (numpy, torch):

    ~/.cache/vision-train/venv/bin/python data/loader/testdata/make_grouped_batches_golden.py \\
      [--reference=/tmp/group_by_aspect_ratio.py]

Output: whitespace-separated tokens, '#' lines are comments. Per case:
  case <name> <k> <batch_size>
  edges <n> <bin edges, repr>
  sizes <n> <width height of dataset index 0, 1, ...>
  order <n> <the sampler's dataset indices>
  groups <n> <the group of dataset index 0, 1, ...>
  batches <m> then m times: <length> <dataset indices>
"""

import argparse
import bisect
import contextlib
import importlib.util
import io
import os
import random
from collections import defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def bins_of(k):
    return (2 ** np.linspace(-1, 1, 2 * k + 1)).tolist() if k > 0 else [1.0]


def groups_of(sizes, k):
    edges = sorted(bins_of(k))
    return [bisect.bisect_right(edges, float(w) / float(h)) for w, h in sizes]


def grouped_batches(order, group_ids, batch_size):
    buffers = defaultdict(list)
    seen = defaultdict(list)
    batches = []
    for idx in order:
        g = group_ids[idx]
        buffers[g].append(idx)
        seen[g].append(idx)
        if len(buffers[g]) == batch_size:
            batches.append(buffers[g])
            del buffers[g]
        # As torchvision's assert after the deletion: reading the key makes it again, last.
        buffers[g]
    missing = len(order) // batch_size - len(batches)
    for g, buffer in sorted(buffers.items(), key=lambda item: len(item[1]), reverse=True):
        if missing <= 0:
            break
        need = batch_size - len(buffer)
        pool = seen[g] * (-(-need // len(seen[g])))
        batches.append(buffer + pool[:need])
        missing -= 1
    assert missing <= 0
    return batches


def load_reference(path):
    spec = importlib.util.spec_from_file_location("tv_group_by_aspect_ratio", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_reference(module, sizes, order, k, batch_size):
    import torch.utils.data

    class Sizes:  # their fast path: a dataset with get_height_and_width
        def __len__(self):
            return len(sizes)

        def get_height_and_width(self, i):
            return sizes[i][1], sizes[i][0]

    class Fixed(torch.utils.data.Sampler):
        def __iter__(self):
            return iter(order)

        def __len__(self):
            return len(order)

    with contextlib.redirect_stdout(io.StringIO()):  # their bin and count printout
        groups = module.create_aspect_ratio_groups(Sizes(), k=k)
    batches = [list(b) for b in module.GroupedBatchSampler(Fixed(), groups, batch_size)]
    return groups, batches


# Image shapes of COCO train2017's commonest kinds (landscape, portrait, square), shapes exactly
# on the bin edges 1/2, 1 and 2, and odd ones.
SHAPES = [(640, 480), (480, 640), (640, 427), (427, 640), (640, 426), (500, 375), (375, 500),
          (640, 640), (500, 500), (612, 612), (640, 360), (360, 640), (1000, 500), (500, 1000),
          (640, 320), (320, 640), (400, 300), (300, 400), (640, 512), (512, 640), (900, 400),
          (200, 700), (640, 505), (505, 640)]


def random_case(rng, name, k, batch_size, num_images, share, repeats):
    sizes = [rng.choice(SHAPES) if rng.random() < 0.8 else
             (rng.randint(1, 2000), rng.randint(1, 2000)) for _ in range(num_images)]
    order = list(range(num_images))
    rng.shuffle(order)
    order = order[:share]
    # A padded distributed split repeats some indices.
    order += order[:repeats]
    return name, sizes, order, k, batch_size


def cases():
    rng = random.Random(20240517)
    out = []
    # By hand, batch 3, two groups (k = 0: split at 1). Group 0 (portrait) fills a batch at
    # position 3 and so moves behind group 1 in the dict; both end with two images, and the tie
    # goes to group 1, whose key is now older: [1, 5, 1]. 7 // 3 - 1 = 1 batch is missing.
    portrait, landscape = (480, 640), (640, 480)
    out.append(("tie_after_full_batch", [portrait, landscape, portrait, portrait, portrait,
                                         landscape, portrait], [0, 1, 2, 3, 4, 5, 6], 0, 3))
    # A group that had a full batch is completed from its first image on: [3, 4, 0].
    out.append(("fill_from_first", [landscape] * 5 + [portrait], [0, 1, 2, 3, 4, 5], 0, 3))
    # Four groups of one image each (k = 3: 0.75, 4/3, 1 and 2 fall in four bins): the first
    # in the dict is completed by repeating its one image: [2, 2, 2, 2].
    out.append(("repeat_single", [landscape, (1000, 500), portrait, (500, 500)], [2, 0, 3, 1],
                3, 4))
    # Every shape on an edge or either side of one, k = 3, in a fixed order.
    edge_sizes = [(1, 2), (2, 1), (1, 1), (999, 2000), (1001, 2000), (2001, 1000), (1999, 1000),
                  (1260, 1000), (1259, 1000), (794, 1000), (793, 1000), (1588, 1000), (1587, 1000),
                  (630, 1000), (629, 1000), (1, 2000), (2000, 1)]
    out.append(("edges_k3", edge_sizes, list(range(len(edge_sizes))), 3, 1))
    out.append(("edges_k3_b2", edge_sizes, list(reversed(range(len(edge_sizes)))), 3, 2))
    n = 0
    for k in (0, 1, 2, 3, 5):
        for batch_size in (1, 2, 3, 4, 5):
            num_images = rng.randint(batch_size, 60)
            share = rng.randint(batch_size, num_images)
            repeats = rng.randint(0, min(3, share))
            out.append(random_case(rng, f"random{n}", k, batch_size, num_images, share, repeats))
            n += 1
    # A rank's share of a larger dataset at the recipe's settings (k = 3, 2 images).
    out.append(random_case(rng, "recipe_share", 3, 2, 400, 101, 0))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", help="torchvision's references/detection/"
                        "group_by_aspect_ratio.py, to check the rewrite against")
    parser.add_argument("--output", default=os.path.join(HERE, "grouped_batches_golden.txt"))
    args = parser.parse_args()
    reference = load_reference(args.reference) if args.reference else None

    lines = ["# Made by make_grouped_batches_golden.py (torchvision's aspect-ratio grouping, "
             "rewritten; numpy " + np.__version__ + ")" +
             ("; checked against their group_by_aspect_ratio.py" if reference else "")]
    for name, sizes, order, k, batch_size in cases():
        groups = groups_of(sizes, k)
        batches = grouped_batches(order, groups, batch_size)
        assert len(batches) == len(order) // batch_size
        for batch in batches:
            assert len(batch) == batch_size and len({groups[i] for i in batch}) == 1, name
        if reference is not None:
            their_groups, their_batches = run_reference(reference, sizes, order, k, batch_size)
            assert their_groups == groups, f"{name}: groups differ"
            assert their_batches == batches, f"{name}: batches differ"
        lines.append(f"case {name} {k} {batch_size}")
        edges = bins_of(k)
        lines.append(f"edges {len(edges)} " + " ".join(repr(e) for e in edges))
        lines.append(f"sizes {len(sizes)} " + " ".join(f"{w} {h}" for w, h in sizes))
        lines.append(f"order {len(order)} " + " ".join(map(str, order)))
        lines.append(f"groups {len(groups)} " + " ".join(map(str, groups)))
        lines.append(f"batches {len(batches)}")
        lines.extend(f"{len(b)} " + " ".join(map(str, b)) for b in batches)
        print(f"{name}: k {k}, batch {batch_size}, {len(sizes)} images, order of {len(order)}, "
              f"{len(batches)} batches, groups used {sorted(set(groups[i] for i in order))}")
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.output}" + (" (checked against the reference)" if reference else ""))


if __name__ == "__main__":
    main()
