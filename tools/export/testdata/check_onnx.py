"""Runs an ONNX file from //tools/export:onnx with onnxruntime on the images of the bundle the
driver kept (--bundle_dir) and compares with OUR C++ model's outputs there, independently of
onnx_export.py's own check; prints one line per output and size.

Usage: check_onnx.py <model.onnx> <bundle dir> <dynamic|fixed> <tolerance>
The tolerance bounds max |onnxruntime - ours| / max(1, max |ours|); DBNet's binary map, which
multiplies the maps' differences by up to k / 4, is compared with k / 4 times it.
"""
import json
import os
import sys

import onnx
import onnxruntime
import torch


def main(path, bundle, mode, tolerance):
    spec = json.load(open(os.path.join(bundle, "spec.json")))
    reference = torch.load(os.path.join(bundle, "reference.pth"), weights_only=True)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    symbolic = [isinstance(d, str) for d in dims]
    expected = [False, False, True, True] if mode == "dynamic" else [False] * 4
    assert symbolic == expected, f"input dims {dims}: expected symbolic {expected}"
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    cases = sorted({k.split("/")[0] for k in reference})
    for case in cases:
        images = reference[f"{case}/images"]
        for name, got in zip(names, session.run(names, {"images": images.numpy()})):
            ours = reference[f"{case}/{name}"]
            got = torch.from_numpy(got)
            assert got.shape == ours.shape, f"{name}: {list(got.shape)} vs ours {list(ours.shape)}"
            diff = (got - ours).abs().max().item()
            scale = max(1.0, ours.abs().max().item())
            if name == "binary":
                scale *= max(1.0, spec["k"] / 4)
            size = f"{images.shape[2]}x{images.shape[3]}"
            print(f"CHECK {spec['model']} {name} {size}: max abs diff {diff:.3g}, "
                  f"max |ours| {ours.abs().max().item():.3g}")
            assert diff / scale <= tolerance, f"{name} at {size}: {diff} > {tolerance} * {scale}"
            assert ours.abs().max().item() > 0, f"{name} at {size}: ours is all zero"
    print(f"PASS {path}: {len(names)} output(s) x {len(cases)} size(s)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
