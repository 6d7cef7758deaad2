"""Runs a Mask R-CNN ONNX file from //tools/export:onnx with onnxruntime on the images of the
bundle the driver kept (--bundle_dir) and compares its detections with OUR C++ model's,
independently of onnx_export.py's own check; prints one line per case (batch size and image
size). Every detection of ours must have one of onnxruntime's in the same image with the same
label and IoU > 0.99, and the other way round; matched, their boxes, scores and mask
probabilities must agree within the tolerance (boxes: times max(1, max |coordinate|)) and their
pasted masks on all but 1e-3 of the pixels in either mask.

Usage: check_onnx_detections.py <model.onnx> <bundle dir> <tolerance>
"""
import sys

import onnx
import onnxruntime
import torch
import torchvision

NAMES = ["boxes", "scores", "labels", "batch_index", "mask_probs", "masks"]


def matches(ours, got):
    """Greedy, ours best first: each takes the unmatched detection of the same image and label
    that overlaps it most, if by IoU > 0.99."""
    pairs = []
    taken = set()
    for i in range(len(ours["scores"])):
        best, best_iou = None, 0.99
        for j in range(len(got["scores"])):
            if j in taken or got["labels"][j] != ours["labels"][i] or \
                    got["batch_index"][j] != ours["batch_index"][i]:
                continue
            iou = torchvision.ops.box_iou(ours["boxes"][i:i + 1].double(),
                                          got["boxes"][j:j + 1].double()).item()
            if iou > best_iou:
                best, best_iou = j, iou
        if best is not None:
            pairs.append((i, best))
            taken.add(best)
    return pairs


def main(path, bundle, tolerance):
    reference = torch.load(f"{bundle}/reference.pth", weights_only=True)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    ops = {n.op_type for n in model.graph.node}
    assert {"NonMaxSuppression", "RoiAlign"} <= ops, f"no NonMaxSuppression or RoiAlign: {ops}"
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input}
    symbolic = {name: [isinstance(d, str) for d in v] for name, v in dims.items()}
    assert symbolic == {"images": [True, False, True, True], "image_sizes": [True, False]}, dims
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    cases = sorted({k.split("/")[0] for k in reference})
    total = 0
    for case in cases:
        images, sizes = reference[f"{case}/images"], reference[f"{case}/image_sizes"]
        got = session.run(NAMES, {"images": images.numpy(), "image_sizes": sizes.numpy()})
        got = {name: torch.from_numpy(g) for name, g in zip(NAMES, got)}
        ours = {name: reference[f"{case}/{name}"] for name in NAMES}
        pairs = matches(ours, got)
        i = torch.tensor([p[0] for p in pairs], dtype=torch.long)
        j = torch.tensor([p[1] for p in pairs], dtype=torch.long)
        diff = {name: (ours[name][i].double() - got[name][j].double()).abs().max().item()
                for name in ["boxes", "scores", "mask_probs"]}
        pixels = (ours["masks"][i] != got["masks"][j]).sum().item()
        mask_pixels = (ours["masks"][i] | got["masks"][j]).sum().item()
        size = f"{images.shape[0]}x{images.shape[2]}x{images.shape[3]}"
        print(f"CHECK MaskRCNN {size}: ours {len(ours['scores'])} detections "
              f"(per image {ours['batch_index'].bincount().tolist()}), onnxruntime "
              f"{len(got['scores'])}, matched {len(pairs)}; boxes max abs diff "
              f"{diff['boxes']:.3g}, scores {diff['scores']:.3g}, mask_probs "
              f"{diff['mask_probs']:.3g}, pasted mask pixels differing {pixels} of {mask_pixels}")
        assert len(ours["scores"]) > 0, f"{size}: ours has no detections"
        assert len(pairs) == len(ours["scores"]) == len(got["scores"]), f"{size}: unmatched"
        box_scale = max(1.0, ours["boxes"].abs().max().item())
        assert diff["boxes"] <= tolerance * box_scale, f"{size}: boxes {diff['boxes']}"
        assert diff["scores"] <= tolerance, f"{size}: scores {diff['scores']}"
        assert diff["mask_probs"] <= tolerance, f"{size}: mask_probs {diff['mask_probs']}"
        assert pixels <= 1e-3 * mask_pixels, f"{size}: {pixels} mask pixels differ"
        assert mask_pixels > 0, f"{size}: every mask is empty"
        total += len(pairs)
    print(f"PASS {path}: {total} detections matched over {len(cases)} case(s)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
