"""Writes the pycocotools goldens that //evaluation/coco:coco_evaluator_test compares against.

Run with the project's venv (tools/python_requirements.txt pins pycocotools 2.0.11), after
writing the synthetic COCO set the "synthetic" case starts from:

  bazel run //tools:make_synthetic_coco -- --output_dir=/tmp/synthetic_coco --num_train=1 \
      --num_val=40
  ~/.cache/vision-train/venv/bin/python3 evaluation/coco/testdata/make_coco_golden.py \
      --synthetic_json=/tmp/synthetic_coco/annotations/instances_val2017.json

Each case is one JSON file, golden_<case>.json: {"gt": a COCO instances file, "detections":
a results list with both "bbox" and "segmentation", "bbox"/"segm": the twelve numbers of
COCOeval.summarize(), "bbox_class_ap"/"segm_class_ap": AP per category (ascending id, -1
without ground truth)}. The cases are seeded, so rerunning rewrites the same files.

Every coordinate and score is a float32 value (multiples of 1/8, 1/64, 1/1024), because the
C++ side holds them as float: the two sides then compute IoUs from the same numbers. The
ground truth's "area" is its mask's area (maskUtils.area of annToRLE), which the C++
evaluator computes from the mask (see coco_protocol.h). The synthetic generator's own "area"
is OpenCV's raster of the polygon, which covers more pixels than pycocotools' (its boundary
pixels); the script prints pycocotools' numbers with those areas too, to show what the
difference moves (only objects near the area-range borders change range). For segm,
detections are loaded without their "bbox" (as detectron2 does) so that pycocotools takes
mask areas for them.
"""

import argparse
import contextlib
import copy
import io
import json
import os

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

HERE = os.path.dirname(os.path.abspath(__file__))
CATEGORIES = [{"id": 1, "name": "circle"}, {"id": 3, "name": "rectangle"},
              {"id": 7, "name": "triangle"}, {"id": 12, "name": "star"}]
CATEGORY_IDS = [c["id"] for c in CATEGORIES]


def q(value, step):
    """Rounds to a multiple of 1/step: exact in float32."""
    return float(np.round(value * step) / step)


def polygon(rng, cx, cy, radius, points=None):
    """A star-ish polygon around (cx, cy), coordinates in 1/8 px."""
    n = points or int(rng.integers(3, 9))
    angles = np.sort(rng.uniform(0, 2 * np.pi, n))
    radii = radius * rng.uniform(0.5, 1.0, n)
    flat = []
    for a, r in zip(angles, radii):
        flat += [q(cx + r * np.cos(a), 8), q(cy + r * np.sin(a), 8)]
    return flat


def rle_of_raster(raster):
    rle = mask_utils.encode(np.asfortranarray(raster.astype(np.uint8)))
    return {"size": [int(s) for s in rle["size"]], "counts": rle["counts"].decode("ascii")}


def raster_of(segmentation, h, w):
    if isinstance(segmentation, list):
        rle = mask_utils.merge(mask_utils.frPyObjects(segmentation, h, w))
    else:
        rle = mask_utils.frPyObjects(segmentation, h, w) if isinstance(
            segmentation["counts"], list) else segmentation
    return mask_utils.decode(rle)


def rect_raster(h, w, x, y, bw, bh):
    raster = np.zeros((h, w), np.uint8)
    raster[y:y + bh, x:x + bw] = 1
    return raster


class Builder:
    """Collects images, ground truth and detections of one case."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.images, self.annotations, self.detections = [], [], []
        self.file_areas = {}  # annotation id -> the source file's "area", where it has one

    def image(self, image_id, h=120, w=160):
        self.images.append({"id": image_id, "file_name": f"{image_id:06d}.png", "height": h,
                            "width": w})
        return image_id, h, w

    def truth(self, image, category_id, segmentation, crowd=False, bbox=None):
        image_id, h, w = image
        raster = raster_of(segmentation, h, w)
        if bbox is None:
            if isinstance(segmentation, list):
                xs = [v for p in segmentation for v in p[0::2]]
                ys = [v for p in segmentation for v in p[1::2]]
                bbox = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
            else:
                bbox = [float(v) for v in mask_utils.toBbox(mask_utils.encode(
                    np.asfortranarray(raster)))]
        annotation = {"id": len(self.annotations) + 1, "image_id": image_id,
                      "category_id": category_id, "iscrowd": int(crowd),
                      "area": float(raster.sum()), "bbox": [q(v, 64) for v in bbox],
                      "segmentation": segmentation}
        self.annotations.append(annotation)
        return annotation, raster

    def random_truth(self, image, crowd=False, max_radius=40):
        _, h, w = image
        radius = float(self.rng.uniform(4, max_radius))
        cx = float(self.rng.uniform(radius / 2, w - radius / 2))
        cy = float(self.rng.uniform(radius / 2, h - radius / 2))
        category = int(self.rng.choice(CATEGORY_IDS))
        if crowd or self.rng.random() < 0.3:
            raster = raster_of([polygon(self.rng, cx, cy, radius)], h, w)
            if raster.sum() == 0:
                raster[int(cy) % h, int(cx) % w] = 1
            return self.truth(image, category, rle_of_raster(raster), crowd)
        return self.truth(image, category, [polygon(self.rng, cx, cy, radius)])

    def detection(self, image, category_id, bbox, raster, score):
        self.detections.append({"image_id": image[0], "category_id": category_id,
                                "bbox": [q(v, 64) for v in bbox], "score": q(score, 1024),
                                "segmentation": rle_of_raster(raster)})

    def perturbed(self, image, annotation, raster, score, jitter=3.0):
        """A detection near a ground truth: shifted box and mask."""
        _, h, w = image
        x, y, bw, bh = annotation["bbox"]
        j = self.rng.normal(0, jitter, 4)
        box = [x + j[0], y + j[1], max(0.5, bw + j[2]), max(0.5, bh + j[3])]
        dy, dx = (int(v) for v in self.rng.integers(-2, 3, 2))
        shifted = np.roll(np.roll(raster, dy, axis=0), dx, axis=1)
        self.detection(image, annotation["category_id"], box, shifted, score)

    def random_detection(self, image, score=None):
        _, h, w = image
        bw, bh = (float(v) for v in self.rng.uniform(2, 60, 2))
        x, y = float(self.rng.uniform(0, w - bw)), float(self.rng.uniform(0, h - bh))
        raster = rect_raster(h, w, int(x), int(y), max(1, int(bw)), max(1, int(bh)))
        self.detection(image, int(self.rng.choice(CATEGORY_IDS)), [x, y, bw, bh], raster,
                       self.rng.random() if score is None else score)

    def gt_json(self):
        return {"images": self.images, "annotations": self.annotations,
                "categories": CATEGORIES}


def case_perturbed(b):
    for i in range(12):
        image = b.image(100 + 3 * i)
        for _ in range(int(b.rng.integers(0, 7))):
            annotation, raster = b.random_truth(image)
            if b.rng.random() < 0.85:
                b.perturbed(image, annotation, raster, b.rng.random())
        for _ in range(int(b.rng.integers(0, 3))):
            b.random_detection(image)


def case_random(b):
    # Random detections, and detections far off their object (IoUs spread over the
    # thresholds), on larger images with objects of every area range.
    for i in range(8):
        image = b.image(i + 1, 200, 240)
        truths = [b.random_truth(image, max_radius=90) for _ in range(int(b.rng.integers(1, 6)))]
        for _ in range(int(b.rng.integers(5, 30))):
            if b.rng.random() < 0.4:
                annotation, raster = truths[int(b.rng.integers(0, len(truths)))]
                b.perturbed(image, annotation, raster, b.rng.random(), 12.0)
            else:
                b.random_detection(image)


def case_crowd(b):
    for i in range(6):
        image = b.image(i + 1)
        for _ in range(int(b.rng.integers(1, 4))):
            annotation, raster = b.random_truth(image, crowd=True)
            # Several detections inside the crowd region: absorbed, not false positives.
            ys, xs = np.nonzero(raster)
            for _ in range(int(b.rng.integers(1, 5))):
                k = int(b.rng.integers(0, len(xs)))
                small = rect_raster(image[1], image[2], int(xs[k]), int(ys[k]), 3, 3)
                b.detection(image, annotation["category_id"],
                            [float(xs[k]), float(ys[k]), 3, 3], small, b.rng.random())
        for _ in range(int(b.rng.integers(1, 4))):
            annotation, raster = b.random_truth(image)
            b.perturbed(image, annotation, raster, b.rng.random())


def case_empty(b):
    # Images with ground truth and no detections, with detections and no ground truth, and
    # with neither.
    for i in range(9):
        image = b.image(10 + i)
        kind = i % 3
        if kind != 1:
            for _ in range(int(b.rng.integers(1, 4))):
                annotation, raster = b.random_truth(image)
                if kind == 2 and b.rng.random() < 0.7:
                    b.perturbed(image, annotation, raster, b.rng.random())
        if kind == 1 and i != 4:
            for _ in range(int(b.rng.integers(1, 5))):
                b.random_detection(image)


def case_many(b):
    # More than 100 detections per image (maxDets cuts), with tied scores across images.
    for i in range(3):
        image = b.image(i + 1, 160, 200)
        truths = [b.random_truth(image) for _ in range(int(b.rng.integers(5, 15)))]
        for _ in range(150):
            if b.rng.random() < 0.5:
                annotation, raster = truths[int(b.rng.integers(0, len(truths)))]
                b.perturbed(image, annotation, raster, float(b.rng.integers(0, 40)) / 40, 5.0)
            else:
                b.random_detection(image, float(b.rng.integers(0, 40)) / 40)


def case_borders(b):
    # Squares whose areas sit on, and one pixel either side of, 32^2 and 96^2 (both ends of a
    # range are inclusive), found by detections of the same or a slightly different size.
    sides = [31, 32, 33, 95, 96, 97]
    for i, side in enumerate(sides):
        image = b.image(i + 1, 120, 120)
        raster = rect_raster(120, 120, 5, 5, side, side)
        for crowd in (False, True) if side == 32 else (False,):
            category = CATEGORY_IDS[i % 4]
            annotation, _ = b.truth(image, category, rle_of_raster(raster), crowd,
                                    bbox=[5, 5, side, side])
            for delta in (-1, 0, 1):
                s = side + delta
                b.detection(image, category, [5, 5, s, s], rect_raster(120, 120, 5, 5, s, s),
                            b.rng.random())
        # Detections of no object with areas 1023, 1024 and 1025 px: their boxes
        # (w * h) and masks (the first pixels in column-major order).
        for area in (1023, 1024, 1025):
            raster = np.zeros(120 * 120, np.uint8)
            raster[:area] = 1
            b.detection(image, CATEGORY_IDS[(i + 1) % 4], [0, 0, area / 32, 32],
                        raster.reshape((120, 120), order="F"), b.rng.random())


def case_duplicates(b):
    for i in range(5):
        image = b.image(i + 1)
        for _ in range(int(b.rng.integers(1, 5))):
            annotation, raster = b.random_truth(image)
            score = q(b.rng.random(), 16)
            for _ in range(int(b.rng.integers(1, 4))):
                b.detection(image, annotation["category_id"], annotation["bbox"], raster, score)


def case_synthetic(b, path, num_images=16):
    """The synthetic generator's first images, each object found by a perturbed detection."""
    with open(path) as f:
        source = json.load(f)
    images = sorted(source["images"], key=lambda image: image["id"])[:num_images]
    by_id = {}
    for image in images:
        by_id[image["id"]] = b.image(image["id"], image["height"], image["width"])
    for annotation in source["annotations"]:
        image = by_id.get(annotation["image_id"])
        if image is None:
            continue
        segmentation = annotation["segmentation"]
        if isinstance(segmentation, list):
            # The file's 1/100 px are not float32 values (see the module comment).
            segmentation = [[q(v, 8) for v in p] for p in segmentation]
        truth, raster = b.truth(image, annotation["category_id"], segmentation,
                                bool(annotation["iscrowd"]), annotation["bbox"])
        b.file_areas[truth["id"]] = annotation["area"]
        if not annotation["iscrowd"] and b.rng.random() < 0.85:
            b.perturbed(image, truth, raster, b.rng.random())
    for image in by_id.values():
        for _ in range(int(b.rng.integers(0, 3))):
            b.random_detection(image)


CASES = {
    "perturbed": case_perturbed,
    "random": case_random,
    "crowd": case_crowd,
    "empty": case_empty,
    "many": case_many,
    "borders": case_borders,
    "duplicates": case_duplicates,
    "synthetic": case_synthetic,
}


def evaluate(gt_json, detections, iou_type):
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = copy.deepcopy(gt_json)
        gt.createIndex()
        results = copy.deepcopy(detections)
        for r in results:
            r.pop("bbox" if iou_type == "segm" else "segmentation")
        dt = gt.loadRes(results)
        evaluator = COCOeval(gt, dt, iou_type)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    precision = evaluator.eval["precision"]
    class_ap = []
    for k in range(len(CATEGORY_IDS)):
        p = precision[:, :, k, 0, -1]
        class_ap.append(float(np.mean(p[p > -1])) if (p > -1).any() else -1.0)
    return [float(s) for s in evaluator.stats], class_ap


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--synthetic_json", required=True,
                        help="instances_val2017.json of //tools:make_synthetic_coco (seed 1)")
    args = parser.parse_args()
    for seed, (name, make) in enumerate(CASES.items()):
        builder = Builder(seed)
        if make is case_synthetic:
            make(builder, args.synthetic_json)
        else:
            make(builder)
        gt_json = builder.gt_json()
        golden = {"gt": gt_json, "detections": builder.detections}
        for iou_type in ("bbox", "segm"):
            golden[iou_type], golden[iou_type + "_class_ap"] = evaluate(
                gt_json, builder.detections, iou_type)
        path = os.path.join(HERE, f"golden_{name}.json")
        with open(path, "w") as f:
            json.dump(golden, f, separators=(",", ":"))
            f.write("\n")
        print(f"{path}: {len(gt_json['images'])} images, {len(gt_json['annotations'])} gt, "
              f"{len(builder.detections)} dt; bbox AP {golden['bbox'][0]:.4f}, "
              f"segm AP {golden['segm'][0]:.4f}")
        if builder.file_areas:
            file_json = copy.deepcopy(gt_json)
            for annotation in file_json["annotations"]:
                annotation["area"] = builder.file_areas[annotation["id"]]
            for iou_type in ("bbox", "segm"):
                stats, _ = evaluate(file_json, builder.detections, iou_type)
                changed = [f"{i}: {a:.4f} -> {s:.4f}" for i, (a, s) in
                           enumerate(zip(golden[iou_type], stats)) if abs(a - s) > 1e-12]
                print(f"  {iou_type} with the file's own areas: "
                      f"{', '.join(changed) or 'the same twelve numbers'}")


if __name__ == "__main__":
    main()
