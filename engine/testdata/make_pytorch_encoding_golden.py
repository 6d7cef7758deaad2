"""Regenerates pytorch_encoding_golden.txt for segmentation_inference_test: the scores of the DANet
authors' multi-scale evaluation (PyTorch-Encoding's MultiEvalModule, as junfu1115/DANet ships it at
commit c7a2f60, the code behind the paper's Cityscapes numbers) on a tiny image with a tiny known
"model", so that the test can hold engine::SegmentationScores with the PyTorch-Encoding rules
(OVERHANG windows, pad_value -mean/std, SUM_EXP_LOGITS, align_corners) to their code's result.

Their code is run, not rewritten here: the script takes MultiEvalModule and its helpers
(module_inference, resize_image, pad_image, crop_image, flip_image) out of their base.py by
parsing it, and runs them on the CPU in float64 (.cuda() made a no-op). Nothing of theirs is
stored in this repository. Needs the project's venv (tools/setup.sh) and their file:

    git clone https://github.com/junfu1115/DANet && \\
      git -C DANet show c7a2f60:encoding/models/base.py > /tmp/danet_base.py
    ~/.cache/vision-train/venv/bin/python engine/testdata/make_pytorch_encoding_golden.py \\
      --reference=/tmp/danet_base.py

The "model" is segmentation_inference_test.cc's KnownLogits (same constants): a 1x1 mixing of
the pixels, a ramp over the columns (so a mirrored input gives other logits) and each input's
mean (so what a window holds, padding included, changes the logits). The image is 10x14 (base
size 14, the long side, as Cityscapes' 2048 is its images' width), the crop 8.

Cases (their settings):
  ms:        multi_scales=True: scales 0.5 ... 2.2 of the base size, stride int(8 * 1/2) = 4, flip
  ss:        multi_scales=False: scale 1, stride int(8 * 2/3) = 5, flip
  ms_noflip: ms without flip

Output: whitespace-separated text, '#' lines are comments; blocks "<name> <ndim> <dims...>
<values...>" in C order: "input" (1x3x10x14, float32-representable values: the test feeds them
as float32) and per case "<case>/scales", "<case>/stride" and "<case>/log_scores" (the log of
their summed scores, 3x10x14: what SegmentationScores returns with SUM_EXP_LOGITS).
"""
import argparse
import ast
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel.data_parallel import DataParallel

HERE = os.path.dirname(os.path.abspath(__file__))
HELPERS = {"module_inference", "resize_image", "pad_image", "crop_image", "flip_image"}
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def known_logits(images):
    """segmentation_inference_test.cc's KnownLogits: [N, 3, H, W] -> [N, 3, H, W]."""
    on = dict(dtype=images.dtype)
    weight = torch.tensor([0.9, -0.4, 0.3, -0.2, 0.8, -0.5, 0.1, 0.2, 0.7], **on).view(3, 3)
    bias = torch.tensor([0.1, -0.2, 0.05], **on).view(1, 3, 1, 1)
    ramp = torch.tensor([0.15, -0.1, 0.02], **on).view(1, 3, 1, 1)
    global_weight = torch.tensor([1.5, -1.0, 0.5], **on).view(1, 3, 1, 1)
    width = images.shape[3]
    mixed = torch.einsum("kc,nchw->nkhw", weight, images) + bias
    columns = torch.arange(width, **on).view(1, 1, 1, width) * ramp
    mean = images.mean(dim=(1, 2, 3)).view(-1, 1, 1, 1) * global_weight
    return mixed + columns + mean


class KnownModel(nn.Module):
    """What MultiEvalModule reads of a segmentation model (their BaseNet's attributes)."""

    def __init__(self, base_size, crop_size):
        super().__init__()
        self.base_size = base_size
        self.crop_size = crop_size
        self.mean = MEAN
        self.std = STD
        self._up_kwargs = {"mode": "bilinear", "align_corners": True}

    def evaluate(self, x):
        return known_logits(x)


def load_reference(path):
    """MultiEvalModule and its helpers from their base.py, in a namespace of their imports."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    wanted = [node for node in tree.body
              if (isinstance(node, ast.ClassDef) and node.name == "MultiEvalModule")
              or (isinstance(node, ast.FunctionDef) and node.name in HELPERS)]
    names = {node.name for node in wanted}
    missing = ({"MultiEvalModule"} | HELPERS) - names
    if missing:
        raise SystemExit(f"{path}: no {sorted(missing)}; give encoding/models/base.py of "
                         "junfu1115/DANet at c7a2f60")
    namespace = {"math": math, "np": np, "torch": torch, "nn": nn, "F": F,
                 "DataParallel": DataParallel, "upsample": F.interpolate}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), path, "exec"), namespace)
    return namespace["MultiEvalModule"]


def add_block(lines, name, tensor):
    t = tensor.detach().to(torch.float64).contiguous()
    dims = " ".join(str(d) for d in t.shape)
    lines.append(f"{name} {t.dim()} {dims}".rstrip())
    values = [repr(float(v)) for v in t.reshape(-1).tolist()]
    for start in range(0, len(values), 8):
        lines.append(" ".join(values[start:start + 8]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True,
                        help="junfu1115/DANet's encoding/models/base.py at commit c7a2f60")
    parser.add_argument("--output", default=os.path.join(HERE, "pytorch_encoding_golden.txt"))
    args = parser.parse_args()

    # Their forward allocates with .cuda(); on this CPU-only run it stays where it is.
    torch.Tensor.cuda = lambda self, *a, **k: self
    multi_eval_module = load_reference(args.reference)

    generator = torch.Generator().manual_seed(31)
    # float32 values, so that the test's float32 input is exactly this one.
    image = torch.randn(1, 3, 10, 14, generator=generator).to(torch.float32).to(torch.float64)
    model = KnownModel(base_size=14, crop_size=8)

    lines = ["# Made by make_pytorch_encoding_golden.py from junfu1115/DANet c7a2f60's "
             "MultiEvalModule; torch " + torch.__version__]
    add_block(lines, "input", image[0])
    for case, multi_scales, flip in [("ms", True, True), ("ss", False, True),
                                     ("ms_noflip", True, False)]:
        evaluator = multi_eval_module(model, 3, flip=flip, multi_scales=multi_scales)
        evaluator.eval()
        with torch.no_grad():
            scores = evaluator(image)[0]
        stride = int(model.crop_size * (2.0 / 3.0 if len(evaluator.scales) == 1 else 0.5))
        log_scores = torch.log(scores)
        top2 = log_scores.topk(2, dim=0).values
        margin = (top2[0] - top2[1]).min().item()
        # The test compares label maps exactly: no pixel may be a near tie.
        assert margin > 1e-4, f"{case}: smallest top-2 margin {margin}; choose another seed"
        add_block(lines, f"{case}/scales", torch.tensor(evaluator.scales, dtype=torch.float64))
        add_block(lines, f"{case}/stride", torch.tensor([stride]))
        add_block(lines, f"{case}/log_scores", log_scores)
        print(f"{case}: scales {evaluator.scales}, stride {stride}, flip {flip}, "
              f"log-scores in [{log_scores.min().item():.3f}, {log_scores.max().item():.3f}], "
              f"smallest top-2 margin {margin:.2e}")
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
