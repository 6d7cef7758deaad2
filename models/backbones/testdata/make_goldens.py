"""Regenerates the golden torch.save files of torchvision_import_test. The checked-in files come
from PyPI torch==2.11.0 and torchvision==0.26.0 in tools/setup.sh's venv (the zip format with
byteorder and 64-byte-aligned storages that current torch.save writes):

    ~/.cache/vision-train/venv/bin/python3 models/backbones/testdata/make_goldens.py

Values are simple functions of arange so the C++ test can recompute them exactly.
"""
import collections
import os

import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))


def ramp(*shape, scale=0.25, dtype=torch.float32):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float64) * scale).to(dtype).reshape(shape)


def main():
    # The stem of a real resnet18 state dict (an OrderedDict carrying _metadata), plus fc.bias,
    # which a backbone lacks, and a layer1 weight of the wrong shape.
    full = torchvision.models.resnet18().state_dict()
    stem = collections.OrderedDict()
    stem["conv1.weight"] = ramp(64, 3, 7, 7)
    stem["bn1.weight"] = ramp(64, scale=0.5) + 1
    stem["bn1.bias"] = ramp(64, scale=-0.125)
    stem["bn1.running_mean"] = ramp(64, scale=0.0625)
    stem["bn1.running_var"] = ramp(64, scale=0.25) + 1
    stem["bn1.num_batches_tracked"] = torch.tensor(1234, dtype=torch.long)
    stem["layer1.0.conv1.weight"] = ramp(2, 2, 1, 1)
    stem["fc.bias"] = ramp(1000)
    for key in stem:
        assert key in full, key
    stem._metadata = full._metadata
    torch.save(stem, os.path.join(HERE, "resnet18_stem.pth"))

    # A plain dict of views sharing one storage, and other dtypes.
    base = ramp(2, 3)
    views = {
        "base": base,
        "transposed": base.t(),
        "row1": base[1],
        "long": torch.tensor([-5, 0, 1 << 40], dtype=torch.long),
        "half": torch.tensor([0.5, -2.0], dtype=torch.float16),
        "scalar": torch.tensor(7, dtype=torch.long),
    }
    torch.save(views, os.path.join(HERE, "views_dict.pth"))


if __name__ == "__main__":
    main()
