"""Writes the hostile data.pkl inputs of //tools/fuzz:torch_pickle_fuzz_test (regressions of
bugs fixed in models/backbones/torchvision_import.cc; the harness puts data/0 of 16 bytes and
data/1 of 64 bytes beside them). Each must give an error, not a crash or a huge allocation.

  ~/.cache/vision-train/venv/bin/python testdata/fuzz/make_torch_regressions.py
"""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_pickle")


def long1(value):
    """LONG1: the shortest little-endian two's complement of value."""
    n = 1
    while not -(1 << (8 * n - 1)) <= value < (1 << (8 * n - 1)):
        n += 1
    return b"\x8a" + bytes([n]) + value.to_bytes(n, "little", signed=True)


def text(s):
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b


def int_tuple(values):
    return b"(" + b"".join(long1(v) for v in values) + b"t"


def tensor(numel, sizes, strides, offset=0):
    storage = b"(" + text("storage") + b"ctorch\nFloatStorage\n" + text("0") + text("cpu") + \
        long1(numel) + b"tQ"
    return b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + long1(offset) + \
        int_tuple(sizes) + int_tuple(strides) + b"\x89ccollections\nOrderedDict\n)Rt" + b"R"


def state_dict(value):
    return b"\x80\x02}(" + text("w") + value + b"u."


def write(name, data):
    with open(os.path.join(HERE, "regression_" + name + ".pkl"), "wb") as f:
        f.write(data)


# numel * 4 wraps to 16 bytes (the record's size) in 64 bits: a huge allocation before the fix.
write("numel_overflow", state_dict(tensor(2**62 + 4, [1], [1])))
# (size - 1) * stride overflows int64 (undefined behaviour before the fix).
write("stride_overflow", state_dict(tensor(4, [2**62, 3], [4, 2**62])))
# A list that contains itself (memo): a reference cycle, leaked before the fix.
write("self_cycle", b"\x80\x02]q\x00h\x00a.")
# 100000 nested tuples: freed recursively (stack overflow) before the fix.
write("deep_nesting", b"\x80\x02N" + b"\x85" * 100000 + b".")
# A valid tensor whose storage is used again with another element count.
write("storage_reuse", b"\x80\x02}(" + text("a") + tensor(4, [4], [1]) + text("b") +
      tensor(2, [2], [1]) + b"u.")
# A zero size before a negative one (a CI fuzz finding): at::empty threw on the negative size,
# which the sign check had not reached yet.
write("empty_then_negative_size", state_dict(tensor(4, [0, -18], [4, 2**62])))
