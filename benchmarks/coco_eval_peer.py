"""The Python side of benchmarks/coco_eval_vs_pycocotools.sh.

  coco_eval_peer.py generate --images=N --out=DIR [--seed=1]
writes DIR/instances.json (a COCO instances file: N images of 640x480, 1 to 10 objects each in
categories 1, 3, 7, 12 with polygon masks in two-decimal coordinates, some crossing the
image's border, as real COCO files have them, "area" the masks' pixel count as pycocotools
rasterises them, and crowd regions as uncompressed RLE in about one image in six) and
DIR/results.json (about 20 detections per image: the ground truth with perturbed polygons,
some with a wrong category or duplicated, and random false positives; "segmentation" is
compressed RLE from pycocotools' frPyObjects, the string mask.encode gives for that mask,
and "bbox" its box, jittered).

  coco_eval_peer.py evaluate --out=DIR
times pycocotools end to end: COCO(instances.json), loadRes, COCOeval 'bbox' and 'segm'
evaluate + accumulate + summarize, and prints the twelve numbers of each and the seconds.
For segm the results' "bbox" is dropped before loadRes, as detectron2 does, so that areas
are mask areas (evaluation/coco/coco_protocol.h).
"""
import argparse
import contextlib
import io
import json
import os
import time

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

WIDTH, HEIGHT = 640, 480
CATEGORIES = [1, 3, 7, 12]


def two_decimals(v):
    # As COCO's files write coordinates: two decimals, which no binary float holds exactly.
    return np.round(np.asarray(v, dtype=np.float64), 2)


def random_polygon(rng, cx, cy, radius):
    # Not clipped to the image: COCO's polygons may cross its border (the rasteriser clips).
    n = int(rng.integers(5, 11))
    angles = np.sort(rng.uniform(0, 2 * np.pi, n))
    radii = radius * rng.uniform(0.6, 1.0, n)
    xs = cx + radii * np.cos(angles)
    ys = cy + radii * np.sin(angles)
    return two_decimals(np.stack([xs, ys], axis=1).reshape(-1))


def random_object(rng):
    radius = float(np.exp(rng.uniform(np.log(3), np.log(160))))
    cx, cy = rng.uniform(0, WIDTH), rng.uniform(0, HEIGHT)
    polygons = [random_polygon(rng, cx, cy, radius)]
    if rng.random() < 0.15:  # a second part
        polygons.append(random_polygon(rng, cx + rng.normal(0, radius), cy + rng.normal(0, radius),
                                       radius * 0.5))
    return polygons


def rle_of(polygons):
    return mask_utils.merge(mask_utils.frPyObjects([p.tolist() for p in polygons], HEIGHT, WIDTH))


def polygon_box(polygons):
    xy = np.concatenate(polygons).reshape(-1, 2)
    x0, y0 = xy.min(axis=0)
    x1, y1 = xy.max(axis=0)
    return [float(x0), float(y0), float(x1 - x0), float(y1 - y0)]


def crowd_region(rng):
    m = np.zeros((HEIGHT, WIDTH), dtype=np.uint8)
    for _ in range(int(rng.integers(1, 4))):
        w, h = rng.integers(20, 200), rng.integers(20, 150)
        x, y = rng.integers(0, WIDTH - w), rng.integers(0, HEIGHT - h)
        m[y:y + h, x:x + w] = 1
    flat = m.ravel(order="F")
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat[0] == 1:
        counts = [0] + counts
    rle = {"size": [HEIGHT, WIDTH], "counts": counts}
    compressed = mask_utils.frPyObjects(rle, HEIGHT, WIDTH)
    return rle, int(m.sum()), mask_utils.toBbox(compressed).tolist()


def generate(num_images, out, seed):
    rng = np.random.default_rng(seed)
    images, annotations, results = [], [], []

    def add_detection(image_id, category, polygons, score):
        rle = rle_of(polygons)
        box = mask_utils.toBbox(rle) + rng.normal(0, 1.0, 4)
        box[2:] = np.maximum(box[2:], 1.0)
        results.append({"image_id": image_id, "category_id": category,
                        "bbox": [round(float(v), 2) for v in box],
                        "score": round(float(rng.uniform(*score)), 5),
                        "segmentation": {"size": rle["size"],
                                         "counts": rle["counts"].decode("ascii")}})

    for i in range(num_images):
        image_id = 100 + 7 * i
        images.append({"id": image_id, "width": WIDTH, "height": HEIGHT,
                       "file_name": f"{image_id:012d}.jpg"})
        truths = []
        for _ in range(int(rng.integers(1, 11))):
            polygons = random_object(rng)
            category = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
            area = float(mask_utils.area(rle_of(polygons)))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": category, "iscrowd": 0, "area": area,
                                "bbox": polygon_box(polygons),
                                "segmentation": [p.tolist() for p in polygons]})
            truths.append((category, polygons))
        if rng.random() < 1 / 6:
            rle, area, box = crowd_region(rng)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": CATEGORIES[int(rng.integers(len(CATEGORIES)))],
                                "iscrowd": 1, "area": area, "bbox": box, "segmentation": rle})
        matched = 0
        for category, polygons in truths:
            if rng.random() > 0.9:
                continue
            copies = 2 if rng.random() < 0.1 else 1
            for _ in range(copies):
                scale = np.sqrt(max(polygon_box(polygons)[2] * polygon_box(polygons)[3], 1.0))
                shift = rng.normal(0, 0.05 * scale, 2)
                moved = [two_decimals(np.clip(p.reshape(-1, 2) + shift
                                         + rng.normal(0, max(0.5, 0.04 * scale), (len(p) // 2, 2)),
                                         0, [WIDTH, HEIGHT]).reshape(-1)) for p in polygons]
                label = category if rng.random() < 0.9 else CATEGORIES[int(rng.integers(4))]
                add_detection(image_id, label, moved, (0.3, 1.0))
                matched += 1
        for _ in range(max(0, 20 - matched + int(rng.integers(-3, 4)))):
            add_detection(image_id, CATEGORIES[int(rng.integers(4))], random_object(rng), (0.0, 0.9))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "instances.json"), "w") as f:
        json.dump({"images": images, "annotations": annotations,
                   "categories": [{"id": c, "name": f"class{c}"} for c in CATEGORIES]}, f)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f)
    crowd = sum(a["iscrowd"] for a in annotations)
    print(f"data: {num_images} images {WIDTH}x{HEIGHT}, {len(annotations) - crowd} objects, "
          f"{crowd} crowd regions, {len(results)} detections")


def evaluate(out):
    quiet = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(quiet):
        gt = COCO(os.path.join(out, "instances.json"))
    t_coco = time.perf_counter() - start
    stats, seconds = {}, {}
    for iou_type in ("bbox", "segm"):
        t0 = time.perf_counter()
        with open(os.path.join(out, "results.json")) as f:
            dets = json.load(f)
        if iou_type == "segm":
            for d in dets:
                d.pop("bbox", None)
        with contextlib.redirect_stdout(quiet):
            dt = gt.loadRes(dets)
            t_load = time.perf_counter() - t0
            e = COCOeval(gt, dt, iou_type)
            e.evaluate()
            e.accumulate()
            e.summarize()
        stats[iou_type] = e.stats
        seconds[iou_type] = (t_load, time.perf_counter() - t0 - t_load)
    total = time.perf_counter() - start
    for iou_type in ("bbox", "segm"):
        print(f"python {iou_type} " + " ".join(f"{v:.12f}" for v in stats[iou_type]))
    print(f"python seconds {total:.3f} (COCO() {t_coco:.3f}, "
          f"bbox loadRes {seconds['bbox'][0]:.3f} eval {seconds['bbox'][1]:.3f}, "
          f"segm loadRes {seconds['segm'][0]:.3f} eval {seconds['segm'][1]:.3f})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["generate", "evaluate"])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.command == "generate":
        generate(args.images, args.out, args.seed)
    else:
        evaluate(args.out)


if __name__ == "__main__":
    main()
