"""Writes the cityscapesScripts goldens that
//evaluation/semantic_segmentation:semantic_segmentation_evaluator_test compares against.

Run with the project's venv (tools/python_requirements.txt pins cityscapesscripts 2.3.0):

  ~/.cache/vision-train/venv/bin/python evaluation/semantic_segmentation/testdata/make_miou_golden.py

Each case is a directory <case>/ in the layout cityscapesScripts reads: ground truth
gtFine/val/<city>/<city>_<seq>_<frame>_gtFine_labelIds.png and predictions
results/<city>/<city>_<seq>_<frame>_leftImg8bit.png, both 8-bit label ids (0..33). The script
pairs them with the official getPrediction() (its search of the results tree for
<city>_<seq>_<frame>*.png), scores them with the official evaluateImgLists() (pixel level only:
no instance-level iIoU, which needs instance maps), and writes golden_<case>.json:
  {"pairs": [[ground truth, prediction], ...] (paths relative to this directory),
   "class_iou": {name: IoU or null (NaN: not scored) for the 19 evaluated classes},
   "miou": the "Score Average" of classes,
   "category_iou": {category: IoU or null}, "category_miou": the average over categories,
   "pixels": scored ground-truth pixels (the matrix's rows of evaluated labels)}.
The module reads no environment variable here: its args object gets every path directly.

Cases (seeded, so rerunning rewrites the same files):
  all_classes      every label id in the ground truth, predictions with a quarter of their
                   pixels replaced by random label ids (evaluated and ignored ones);
  missing_classes  a few classes only: whole categories absent (object, human but person),
                   "person" never predicted, "truck" predicted but in no ground truth, "bus"
                   predicted only on ignored ground truth (so still not scored), ignored
                   label ids (unlabeled, static, parking) predicted on scored pixels;
  random           independent random label ids in both maps.
"""

import json
import math
import os
import shutil

import numpy as np
from PIL import Image
from cityscapesscripts.evaluation import evalPixelLevelSemanticLabeling as cs_eval
from cityscapesscripts.helpers.labels import category2labels, labels

HERE = os.path.dirname(os.path.abspath(__file__))
HEIGHT, WIDTH = 32, 64
EVALUATED = [label for label in labels if label.id >= 0 and not label.ignoreInEval]
IGNORED_IDS = [label.id for label in labels if label.id >= 0 and label.ignoreInEval]
NAME_TO_ID = {label.name: label.id for label in labels}


def blocks(rng, ids, count):
    """A label map of random rectangles of the given ids over a random background of them."""
    label_map = np.full((HEIGHT, WIDTH), rng.choice(ids), dtype=np.uint8)
    for _ in range(count):
        y, x = rng.integers(0, HEIGHT - 2), rng.integers(0, WIDTH - 2)
        h, w = rng.integers(2, HEIGHT // 2), rng.integers(2, WIDTH // 3)
        label_map[y:y + h, x:x + w] = rng.choice(ids)
    return label_map


def case_all_classes(rng):
    maps = []
    for _ in range(2):
        gt = blocks(rng, list(range(34)), 40)
        # Every label id at least once: a strip across the top row.
        gt[0, :34] = np.arange(34, dtype=np.uint8)
        pred = gt.copy()
        noisy = rng.random(gt.shape) < 0.25
        pred[noisy] = rng.integers(0, 34, size=int(noisy.sum()))
        maps.append((gt, pred))
    return maps


def case_missing_classes(rng):
    present = [NAME_TO_ID[n] for n in ("road", "sidewalk", "building", "vegetation", "sky",
                                       "car", "person")]
    ignored = [NAME_TO_ID[n] for n in ("unlabeled", "ego vehicle", "static", "parking")]
    maps = []
    for _ in range(3):
        gt = blocks(rng, present + ignored, 12)
        gt[0, :len(present)] = present
        pred = gt.copy()
        noisy = rng.random(gt.shape) < 0.2
        pred[noisy] = rng.choice(present + ignored, size=int(noisy.sum()))
        person = gt == NAME_TO_ID["person"]
        pred[person] = np.where(rng.random(gt.shape) < 0.5, NAME_TO_ID["rider"],
                                NAME_TO_ID["sidewalk"])[person]
        pred[pred == NAME_TO_ID["person"]] = NAME_TO_ID["road"]
        pred[4:8, 10:20] = NAME_TO_ID["truck"]
        on_ignored = np.isin(gt, ignored)
        pred[on_ignored & (rng.random(gt.shape) < 0.5)] = NAME_TO_ID["bus"]
        pred[~on_ignored & (pred == NAME_TO_ID["bus"])] = NAME_TO_ID["building"]
        maps.append((gt, pred))
    return maps


def case_random(rng):
    return [(rng.integers(0, 34, size=(HEIGHT, WIDTH), dtype=np.uint8),
             rng.integers(0, 34, size=(HEIGHT, WIDTH), dtype=np.uint8)) for _ in range(3)]


def nan_to_none(value):
    return None if math.isnan(value) else value


def write_case(name, maps):
    root = os.path.join(HERE, name)
    shutil.rmtree(root, ignore_errors=True)
    cities = ["aachen", "bochum", "frankfurt"]
    gt_files = []
    for i, (gt, pred) in enumerate(maps):
        city = cities[i % len(cities)]
        stem = "{}_{:06d}_{:06d}".format(city, i, 19 + 7 * i)
        gt_dir = os.path.join(root, "gtFine", "val", city)
        pred_dir = os.path.join(root, "results", city)
        os.makedirs(gt_dir, exist_ok=True)
        os.makedirs(pred_dir, exist_ok=True)
        gt_file = os.path.join(gt_dir, stem + "_gtFine_labelIds.png")
        Image.fromarray(gt, mode="L").save(gt_file)
        Image.fromarray(pred, mode="L").save(os.path.join(pred_dir, stem + "_leftImg8bit.png"))
        gt_files.append(gt_file)

    args = cs_eval.args
    args.predictionPath = os.path.join(root, "results")
    args.predictionWalk = None
    args.evalInstLevelScore = False
    args.evalPixelAccuracy = False
    args.JSONOutput = False
    args.quiet = True
    predictions = [cs_eval.getPrediction(args, gt) for gt in gt_files]
    result = cs_eval.evaluateImgLists(predictions, gt_files, args)

    evaluated_ids = [label.id for label in EVALUATED]
    conf = np.array(result["confMatrix"], dtype=np.int64)
    golden = {
        "pairs": [[os.path.relpath(g, HERE), os.path.relpath(p, HERE)]
                  for g, p in zip(gt_files, predictions)],
        "class_iou": {label.name: nan_to_none(result["classScores"][label.name])
                      for label in EVALUATED},
        "miou": nan_to_none(result["averageScoreClasses"]),
        "category_iou": {c: nan_to_none(result["categoryScores"][c]) for c in category2labels},
        "category_miou": nan_to_none(result["averageScoreCategories"]),
        "pixels": int(conf[evaluated_ids, :].sum()),
    }
    with open(os.path.join(HERE, "golden_{}.json".format(name)), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    scored = sum(v is not None for v in golden["class_iou"].values())
    print("{}: {} images, {} scored pixels, {} of 19 classes scored, mIoU {:.6f}, "
          "category mIoU {:.6f}".format(name, len(maps), golden["pixels"], scored,
                                        golden["miou"], golden["category_miou"]))


def main():
    rng = np.random.default_rng(14)
    write_case("all_classes", case_all_classes(rng))
    write_case("missing_classes", case_missing_classes(rng))
    write_case("random", case_random(rng))


if __name__ == "__main__":
    main()
