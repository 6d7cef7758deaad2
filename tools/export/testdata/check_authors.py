"""Loads an --layout=mhliao_db or --layout=junfu1115_danet export into the authors' module
structure (authors_models.py), runs it on the images OUR model ran on (model_outputs) and
compares the outputs; prints one CHECK line per output and image size.

Usage: check_authors.py --export=FILE.pth --ours=OUTPUTS.pth --expect=match|gap
           [--k=50] [--multi_dilation 4 8 16]

The architecture is read from the file's keys and shapes (depth, deformable stages, channels,
classes); what weights cannot say comes from the flags: DB's k (its experiments' 50) and the
authors' layer4 dilations for a multi-grid DANet. Loading is strict=False as the authors load,
and the missing keys must be exactly the unused classifier layers the export tool names (DB:
backbone fc and smooth; DANet: pretrained.fc), with nothing unexpected.

Float32 noise is judged against the authors' own: the same structure is also run in float64,
and |theirs (float32) - ours| may be at most 4 x |theirs (float32) - theirs (float64)| (the
float32 rounding of their network on that output; both sides round independently, so about 1 to
2 x is typical) plus 1e-6 x max(1, max |ours|).
--expect=match: every output within that bound.
--expect=gap: a network the layout holds the weights of but the authors' code computes
differently (DB's deformable ResNet-50, whose strided blocks predict offsets at stride 1:
MhLiao/DB issue #250; the authors' dilated ResNet-18/34, whose BasicBlock also dilates conv2):
their structure as written must differ from ours by more than 0.01 x max(1, max |ours|) on some
output, and the same structure with that one difference removed must be within the bound, which
shows that the difference is that and nothing else.
"""
import argparse
import re
import sys

import torch

import authors_models

DB_MISSING = {f"model.module.backbone.{name}" for name in
              ("fc.weight", "fc.bias", "smooth.weight", "smooth.bias")}
DANET_MISSING = {"pretrained.fc.weight", "pretrained.fc.bias"}
DEPTHS = {(2, 2, 2, 2, False): "resnet18", (3, 4, 6, 3, False): "resnet34",
          (3, 4, 6, 3, True): "resnet50", (3, 4, 23, 3, True): "resnet101",
          (3, 8, 36, 3, True): "resnet152"}


def resnet_name(state, prefix):
    blocks = []
    for stage in range(1, 5):
        indices = {int(m.group(1)) for k in state
                   if (m := re.match(re.escape(prefix) + rf"layer{stage}\.(\d+)\.", k))}
        blocks.append(len(indices))
    return DEPTHS[tuple(blocks) + (f"{prefix}layer1.0.conv3.weight" in state,)]


def db_model(state, k, fixed):
    prefix = "model.module.backbone."
    name = resnet_name(state, prefix)
    if any(".conv2_offset." in key for key in state):
        name = "deformable_" + name
    decoder = "model.module.decoder."
    in_channels = [state[f"{decoder}in{i}.weight"].shape[1] for i in (2, 3, 4, 5)]
    inner = state[f"{decoder}in5.weight"].shape[0]
    model = authors_models.SegDetectorModel(name, in_channels, inner, k, offset_stride_fix=fixed)
    return model, f"SegDetectorModel({name}, in_channels={in_channels}, inner={inner}, k={k})"


def danet_model(state, multi_dilation, fixed):
    name = resnet_name(state, "pretrained.")
    classes = state["head.conv8.1.weight"].shape[0]
    model = authors_models.DANet(classes, name, multi_grid=bool(multi_dilation),
                                 multi_dilation=multi_dilation, conv2_dilation_one=fixed)
    grid = f", multi_dilation={multi_dilation}" if multi_dilation else ""
    return model, f"DANet({classes} classes, {name}{grid})"


def load(model, state, expected_missing):
    result = model.load_state_dict(state, strict=False)
    assert not result.unexpected_keys, f"unexpected keys: {result.unexpected_keys}"
    assert set(result.missing_keys) == expected_missing, \
        f"missing {sorted(result.missing_keys)}, expected exactly {sorted(expected_missing)}"
    theirs = model.state_dict()
    for key, value in state.items():
        assert torch.equal(theirs[key], value), f"{key} differs after loading"
    return model.eval()


def run(model, images, db, double=False):
    """The outputs under our names; `double` runs a float64 copy (DB's SegDetectorModel casts
    its input to float32, so its float64 run calls the wrapped BasicModel)."""
    if double:
        model, images = model.double(), images.double()
        if db:
            model = model.model
    with torch.no_grad():
        if db:
            # training=True is the SegDetector's path that also returns the threshold map and
            # the step function's binary map (its demo returns `binary` alone); eval() keeps
            # BatchNorm on its running statistics.
            out = model(images, training=True)
            return {"probability": out["binary"], "threshold": out["thresh"],
                    "binary": out["thresh_binary"]}
        fused, position, channel = model(images)
        return {"fused": fused, "position": position, "channel": channel}


def compare(model, model64, ours, db, label):
    """Prints one line per output and size; returns the largest |theirs - ours| over the bound
    and over max(1, max |ours|), and the number of sizes."""
    worst_bound, worst_scaled = 0.0, 0.0
    cases = sorted({key.split("/")[0] for key in ours})
    for case in cases:
        images = ours[f"{case}/images"]
        size = f"{images.shape[2]}x{images.shape[3]}"
        theirs = run(model, images, db)
        theirs64 = run(model64, images, db, double=True)
        for name, value in theirs.items():
            mine = ours[f"{case}/{name}"]
            assert value.shape == mine.shape, f"{name}: {list(value.shape)} vs {list(mine.shape)}"
            assert mine.std().item() > 0, f"{name} at {size}: ours is constant"
            diff = (value - mine).abs().max().item()
            rounding = (value.double() - theirs64[name]).abs().max().item()
            scale = max(1.0, mine.abs().max().item())
            worst_bound = max(worst_bound, diff / (4 * rounding + 1e-6 * scale))
            worst_scaled = max(worst_scaled, diff / scale)
            print(f"CHECK {label} {name} {size}: max |theirs - ours| {diff:.3g}; float32 "
                  f"rounding of theirs {rounding:.3g}; max |ours| {mine.abs().max().item():.3g}")
    return worst_bound, worst_scaled, len(cases)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--export", required=True)
    parser.add_argument("--ours", required=True)
    parser.add_argument("--expect", choices=("match", "gap"), required=True)
    parser.add_argument("--k", type=float, default=50.0)
    parser.add_argument("--multi_dilation", type=int, nargs="*", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    state = torch.load(args.export, weights_only=True)
    ours = torch.load(args.ours, weights_only=True)
    db = any(key.startswith("model.module.") for key in state)
    missing = DB_MISSING if db else DANET_MISSING

    def build(fixed):
        if db:
            model, what = db_model(state, args.k, fixed)
        else:
            model, what = danet_model(state, args.multi_dilation, fixed)
        return load(model, state, missing), what

    model, what = build(fixed=False)
    print(f"loaded {len(state)} tensors into the authors' {what}; missing exactly "
          f"{', '.join(sorted(missing))}")
    bound, scaled, cases = compare(model, build(fixed=False)[0], ours, db, "as written")
    print(f"as written: max |theirs - ours| / max(1, max |ours|) = {scaled:.3g}, "
          f"{bound:.3g} x the bound")
    if args.expect == "match":
        assert bound <= 1, f"theirs differs from ours by {bound:.3g} x the float32 bound"
        print(f"PASS: the authors' structure equals ours within float32 rounding on {cases} "
              f"size(s)")
        return
    assert scaled > 0.01, f"expected the documented gap (> 0.01), saw {scaled:.3g}"
    fix = ("conv2_offset with the convolution's stride (MhLiao/DB issue #250)" if db
           else "BasicBlock conv2 undilated")
    fixed_bound, fixed_scaled, _ = compare(build(fixed=True)[0], build(fixed=True)[0], ours, db,
                                           "fixed")
    print(f"with {fix}: max |theirs - ours| / max(1, max |ours|) = {fixed_scaled:.3g}, "
          f"{fixed_bound:.3g} x the bound")
    assert fixed_bound <= 1, f"with the fix, {fixed_bound:.3g} x the float32 bound"
    print(f"PASS: the documented gap, {scaled:.3g} as written; {fixed_scaled:.3g} with {fix}")


if __name__ == "__main__":
    sys.exit(main())
