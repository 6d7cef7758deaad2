"""The Python side of benchmarks/miou_vs_numpy.sh.

  miou_peer.py generate --images=N --out=DIR [--height=1024 --width=2048 --seed=1 --noise=0]
writes DIR/truth.u8 and DIR/prediction.u8: N label maps each, raw 8-bit train ids (19 classes,
255 = ignore) one after another, shaped like Cityscapes maps: a background class with 150
rectangles of random classes and some ignored ones in the ground truth; the prediction is the
ground truth with 60 rectangles of other classes and a band of no class (255) at the bottom,
then a --noise fraction of its pixels (default 0) set to random classes: label maps are mostly
long runs, which our side sums before it stores them, and noise is the case without them.

  miou_peer.py evaluate --images=N --out=DIR [--height --width --repeats=3]
times the usual numpy confusion matrix (the fast_hist of FCN/DeepLab/HRNet evaluation code:
np.bincount over 19 * truth + prediction of the pixels whose truth is a class, the prediction's
255 kept as its own column), with mIoU (classes with TP + FP + FN > 0), aAcc and mAcc from it,
and prints the best images/s and the metrics.
"""
import argparse
import os
import time

import numpy as np

CLASSES = 19


def generate(args):
    rng = np.random.default_rng(args.seed)
    h, w = args.height, args.width
    with open(os.path.join(args.out, "truth.u8"), "wb") as truth_file, \
            open(os.path.join(args.out, "prediction.u8"), "wb") as prediction_file:
        for _ in range(args.images):
            truth = np.full((h, w), rng.integers(0, CLASSES), dtype=np.uint8)
            for _ in range(150):
                y, x = rng.integers(0, h), rng.integers(0, w)
                rh, rw = rng.integers(8, h // 4), rng.integers(8, w // 4)
                value = 255 if rng.random() < 0.1 else rng.integers(0, CLASSES)
                truth[y:y + rh, x:x + rw] = value
            prediction = truth.copy()
            prediction[prediction == 255] = rng.integers(0, CLASSES)
            for _ in range(60):
                y, x = rng.integers(0, h), rng.integers(0, w)
                rh, rw = rng.integers(4, h // 8), rng.integers(4, w // 8)
                prediction[y:y + rh, x:x + rw] = rng.integers(0, CLASSES)
            prediction[h - h // 16:, :] = 255
            if args.noise > 0:
                noisy = rng.random((h, w)) < args.noise
                prediction[noisy] = rng.integers(0, CLASSES, size=int(noisy.sum()))
            truth_file.write(truth.tobytes())
            prediction_file.write(prediction.tobytes())


def read_maps(path, args):
    data = np.fromfile(path, dtype=np.uint8)
    return data.reshape(args.images, args.height, args.width)


def evaluate(args):
    truths = read_maps(os.path.join(args.out, "truth.u8"), args)
    predictions = read_maps(os.path.join(args.out, "prediction.u8"), args)
    columns = CLASSES + 1
    best = 0.0
    for _ in range(args.repeats):
        start = time.perf_counter()
        matrix = np.zeros((CLASSES, columns), dtype=np.int64)
        for truth, prediction in zip(truths, predictions):
            scored = truth != 255
            t = truth[scored].astype(np.int64)
            p = prediction[scored].astype(np.int64)
            p[p == 255] = CLASSES
            matrix += np.bincount(columns * t + p, minlength=CLASSES * columns).reshape(
                CLASSES, columns)
        tp = np.diag(matrix[:, :CLASSES]).astype(np.float64)
        rows = matrix.sum(1)
        denominator = rows + matrix[:, :CLASSES].sum(0) - tp
        present = denominator > 0
        miou = (tp[present] / denominator[present]).mean()
        aacc = tp.sum() / rows.sum()
        macc = (tp[rows > 0] / rows[rows > 0]).mean()
        best = max(best, args.images / (time.perf_counter() - start))
    print("numpy images_per_s %.2f" % best)
    print("numpy mIoU %.12f aAcc %.12f mAcc %.12f" % (miou, aacc, macc))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["generate", "evaluate"])
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--height", type=int, default=1024)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    generate(args) if args.command == "generate" else evaluate(args)


if __name__ == "__main__":
    main()
