"""Writes the seed corpora of //tools/fuzz:torch_state_dict and :torch_pickle.

Small state dicts as torch.save writes them (torch 2.11): an OrderedDict of float tensors, a
keep_vars dict (Parameters), integer, half, bfloat16 and bool tensors, a view with an offset
and strides into a shared storage, an empty tensor, a scalar, and a big integer (LONG1).
torch_state_dict/ gets the zip archives, torch_pickle/ their data.pkl records (the pickle
fuzzer rebuilds an archive around them with storages data/0 of 16 bytes and data/1 of 64
bytes, so its seeds refer to those).

  ~/.cache/vision-train/venv/bin/python testdata/fuzz/make_torch_seeds.py
"""
import collections
import io
import os
import pickle
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, obj):
    os.makedirs(os.path.join(HERE, "torch_state_dict"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "torch_pickle"), exist_ok=True)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getvalue()
    with open(os.path.join(HERE, "torch_state_dict", "seed_" + name + ".pth"), "wb") as f:
        f.write(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        pkl = [n for n in archive.namelist() if n.endswith("/data.pkl")][0]
        with open(os.path.join(HERE, "torch_pickle", "seed_" + name + ".pkl"), "wb") as f:
            f.write(archive.read(pkl))


torch.manual_seed(0)
base = torch.arange(16, dtype=torch.float32)
write("ordered_dict", collections.OrderedDict(
    [("conv.weight", torch.randn(2, 1, 1, 2)), ("bn.running_mean", torch.zeros(4)),
     ("bn.num_batches_tracked", torch.tensor(7))]))
write("keep_vars", torch.nn.Linear(2, 2).state_dict(keep_vars=True))
write("dtypes", {"half": torch.ones(3, dtype=torch.half), "bf16": torch.ones(2, dtype=torch.bfloat16),
                 "long": torch.tensor([2**40, -1]), "bool": torch.tensor([True, False]),
                 "int8": torch.tensor([-3], dtype=torch.int8)})
write("views", {"a": base[2:10:2], "b": base.view(4, 4).t(), "empty": torch.zeros(0, 3),
                "scalar": torch.tensor(1.5)})
write("plain_dict", {"w": torch.ones(4)})
# Not a state dict: errors, but exercise other opcodes (list, tuple, str, float, None).
write("not_state_dict", {"w": [1, 2.5, "x", None, (True,)]})
