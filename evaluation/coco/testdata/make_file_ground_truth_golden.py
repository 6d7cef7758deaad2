"""Writes the end-to-end golden of //evaluation/coco:coco_file_ground_truth_test: a COCO set shaped
like the real files, scored by pycocotools 2.0.11 as a user would score it, which the COCO
dataset plugin and the COCO evaluator must reproduce on the production path (CocoDataset,
the loader's ground truth, CocoEvaluator).

  ~/.cache/vision-train/venv/bin/python3 evaluation/coco/testdata/make_file_ground_truth_golden.py

What makes it "shaped like the real files" (and what the earlier goldens, with float32-exact
coordinates inside the image, did not exercise):
  - polygon coordinates and boxes with two decimals, as COCO's own (e.g. 473.07), which float32
    cannot hold: pycocotools rasterises from the doubles;
  - polygons and boxes that cross the image's border by up to 6 px (COCO has them): pycocotools
    clips while rasterising and keeps the box as written;
  - the file's "area", which is not the raster's pixel count (COCO's is the polygon's area as the
    annotation tool measured it): COCOeval's area ranges use it;
  - crowd regions as uncompressed RLE, and category ids with gaps.
Detections are float32-exact (multiples of 1/64), as a model's float outputs are, with
compressed RLE masks. For segm the detections are scored without their "bbox" (pycocotools then
takes mask areas, detectron2's convention).

Writes file_ground_truth/{images/*.png, instances.json, detections.json, golden.json}; golden.json
holds the twelve numbers of COCOeval.summarize() for bbox and segm, and the same numbers with the
ground truth as the plugin held it before (vertices and box corners clamped to the image,
coordinates in float32, areas from the raster), so the test can check that its data tells the
two apart. Seeded: rerunning rewrites the same files.
"""

import contextlib
import copy
import io
import json
import os

import cv2
import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_ground_truth")
CATEGORIES = [{"id": 2, "name": "cup"}, {"id": 5, "name": "kite"}, {"id": 11, "name": "vase"}]
# (width, height): large enough for COCO's three area ranges (32^2 and 96^2 px apart).
IMAGE_SIZES = [(200, 150), (150, 200), (240, 180), (160, 160), (220, 120), (120, 220)]


def two_decimals(v):
    return float(round(v, 2))


def f32_64(v):
    return float(np.round(v * 64) / 64)


def star(rng, cx, cy, radius, n):
    angles = np.sort(rng.uniform(0, 2 * np.pi, n))
    radii = radius * rng.uniform(0.55, 1.0, n)
    return [(cx + r * np.cos(a), cy + r * np.sin(a)) for a, r in zip(angles, radii)]


def shoelace(points):
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    return 0.5 * abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))


def summarize(gt_dict, detections, iou_type):
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = copy.deepcopy(gt_dict)
        gt.createIndex()
        dets = copy.deepcopy(detections)
        if iou_type == "segm":
            for d in dets:
                d.pop("bbox", None)
        dt = gt.loadRes(dets)
        ev = COCOeval(gt, dt, iou_type)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return [float(s) for s in ev.stats]


def clamped_like_before(gt_dict):
    """The ground truth as the plugin held it before: float32, clamped vertices and box corners,
    areas from the raster of those (what its evaluator computed)."""
    out = copy.deepcopy(gt_dict)
    sizes = {im["id"]: (im["width"], im["height"]) for im in out["images"]}
    for a in out["annotations"]:
        w, h = sizes[a["image_id"]]
        x, y, bw, bh = a["bbox"]
        x1, y1 = np.clip(x, 0, w), np.clip(y, 0, h)
        x2, y2 = np.clip(x + bw, 0, w), np.clip(y + bh, 0, h)
        a["bbox"] = [float(np.float32(v)) for v in (x1, y1, x2 - x1, y2 - y1)]
        if isinstance(a["segmentation"], list):
            a["segmentation"] = [
                [float(np.float32(np.clip(v, 0, w if i % 2 == 0 else h))) for i, v in enumerate(p)]
                for p in a["segmentation"]]
            rle = mask_utils.merge(mask_utils.frPyObjects(a["segmentation"], h, w))
        else:
            rle = mask_utils.frPyObjects(a["segmentation"], h, w)
        a["area"] = float(mask_utils.area(rle))
    return out


def main():
    rng = np.random.default_rng(20261203)
    os.makedirs(os.path.join(HERE, "images"), exist_ok=True)
    images, annotations, detections = [], [], []
    next_id = 1
    for index, (w, h) in enumerate(IMAGE_SIZES):
        image_id = 100 + 7 * index
        name = "%012d.png" % image_id
        # A gradient (the pixels are not scored; it keeps the PNG small).
        yy, xx = np.mgrid[0:h, 0:w]
        pixels = np.stack([xx % 256, yy % 256, (xx + yy + index) % 256], -1).astype(np.uint8)
        cv2.imwrite(os.path.join(HERE, "images", name), pixels)
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
        for k in range(int(rng.integers(4, 8))):
            radius = float(rng.uniform(3, 0.6 * min(w, h)))
            # Some centres near a border, so that the polygon crosses it by a few pixels.
            if k % 2 == 0:
                cx = float(rng.choice([rng.uniform(-2, 6), rng.uniform(w - 6, w + 2)]))
                cy = float(rng.uniform(0, h))
            else:
                cx, cy = float(rng.uniform(0.2 * w, 0.8 * w)), float(rng.uniform(0.2 * h, 0.8 * h))
            points = star(rng, cx, cy, radius, int(rng.integers(4, 10)))
            # At most 6 px outside the image (the plugin's limit is half the image).
            points = [(min(max(x, -6.0), w + 6.0), min(max(y, -6.0), h + 6.0)) for x, y in points]
            points = [(two_decimals(x), two_decimals(y)) for x, y in points]
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            category = CATEGORIES[int(rng.integers(0, len(CATEGORIES)))]["id"]
            ann = {"id": next_id, "image_id": image_id, "category_id": category, "iscrowd": 0,
                   "segmentation": [[c for p in points for c in p]],
                   "bbox": [two_decimals(min(xs)), two_decimals(min(ys)),
                            two_decimals(max(xs) - min(xs)), two_decimals(max(ys) - min(ys))],
                   # The tool's polygon area, not the raster's pixels.
                   "area": two_decimals(shoelace(points))}
            next_id += 1
            annotations.append(ann)
            # A detection near it: shifted, float32-exact, scored; sometimes another class.
            dx, dy = rng.uniform(-2.5, 2.5, 2)
            moved = [[f32_64(x + dx) for x, _ in points], [f32_64(y + dy) for _, y in points]]
            poly = [c for xy in zip(*moved) for c in xy]
            rle = mask_utils.merge(mask_utils.frPyObjects([poly], h, w))
            box = [f32_64(min(moved[0])), f32_64(min(moved[1])),
                   f32_64(max(moved[0]) - min(moved[0])), f32_64(max(moved[1]) - min(moved[1]))]
            det_category = category if rng.uniform() < 0.85 else CATEGORIES[0]["id"]
            detections.append({"image_id": image_id, "category_id": det_category,
                               "bbox": box, "score": f32_64(rng.uniform(0.05, 1.0)),
                               "segmentation": {"size": [h, w],
                                                "counts": rle["counts"].decode("ascii")}})
        # One crowd region per other image, as uncompressed RLE.
        if index % 2 == 1:
            mask = np.zeros((h, w), np.uint8, order="F")
            x0, y0 = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
            mask[y0:y0 + h // 3, x0:x0 + w // 3] = 1
            rle = mask_utils.encode(np.asfortranarray(mask))
            counts, runs, value, run = [], [], 0, 0
            for pixel in mask.flatten(order="F"):
                if pixel == value:
                    run += 1
                else:
                    runs.append(run)
                    value, run = pixel, 1
            runs.append(run)
            bbox = [float(v) for v in mask_utils.toBbox(rle)]
            annotations.append({"id": next_id, "image_id": image_id,
                                "category_id": CATEGORIES[1]["id"], "iscrowd": 1,
                                "segmentation": {"size": [h, w], "counts": [int(r) for r in runs]},
                                "bbox": bbox, "area": float(mask_utils.area(rle))})
            next_id += 1
        # False positives.
        for _ in range(int(rng.integers(1, 4))):
            x, y = rng.uniform(0, w - 8), rng.uniform(0, h - 8)
            bw, bh = rng.uniform(4, w - x), rng.uniform(4, h - y)
            box = [f32_64(x), f32_64(y), f32_64(bw), f32_64(bh)]
            mask = np.zeros((h, w), np.uint8)
            mask[int(y):int(y + bh), int(x):int(x + bw)] = 1
            rle = mask_utils.encode(np.asfortranarray(mask))
            detections.append({"image_id": image_id,
                               "category_id": CATEGORIES[int(rng.integers(0, 3))]["id"],
                               "bbox": box, "score": f32_64(rng.uniform(0.05, 1.0)),
                               "segmentation": {"size": [h, w],
                                                "counts": rle["counts"].decode("ascii")}})
    gt = {"images": images, "annotations": annotations, "categories": CATEGORIES}
    with open(os.path.join(HERE, "instances.json"), "w") as f:
        json.dump(gt, f)
    with open(os.path.join(HERE, "detections.json"), "w") as f:
        json.dump(detections, f)
    before = clamped_like_before(gt)
    golden = {
        "pycocotools": "2.0.11",
        "bbox": summarize(gt, detections, "bbox"),
        "segm": summarize(gt, detections, "segm"),
        "bbox_clamped_ground_truth": summarize(before, detections, "bbox"),
        "segm_clamped_ground_truth": summarize(before, detections, "segm"),
    }
    with open(os.path.join(HERE, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    for t in ("bbox", "segm"):
        diff = max(abs(a - b) for a, b in zip(golden[t], golden[t + "_clamped_ground_truth"]))
        print("%s: %s\n  with the ground truth clamped as before: largest difference %.4f" %
              (t, " ".join("%.4f" % s for s in golden[t]), diff))
    print("%d images, %d annotations, %d detections" %
          (len(images), len(annotations), len(detections)))


if __name__ == "__main__":
    main()
