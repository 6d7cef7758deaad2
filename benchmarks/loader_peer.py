"""The Python side of benchmarks/loader_vs_dataloader.sh: a torch.utils.data.DataLoader over the
same ICDAR2015-layout files doing what our loader does for DBNet training with
models/dbnet/configs/icdar2015_resnet18.pbtxt, written the way the reference trainers write it:

  cv2.imread; colour jitter (brightness 0.125, saturation 0.5, in random order, as
  torchvision); horizontal flip (p 0.5); rotation by [-10, 10] degrees about the centre;
  scale by [0.5, 3]; a 640x640 window that avoids cutting text (gaps between the boxes'
  projections, up to 50 tries, padded when the image is smaller); ImageNet normalisation to
  a float CHW tensor; DBNet's targets as MhLiao/DB's MakeSegDetectionData and MakeBorderMap
  make them (pyclipper JT_ROUND offsets for the shrunk and the dilated polygon, a numpy
  distance map per polygon over its dilated box, float32 maps).

Each worker uses one thread: torch.set_num_threads(1) and cv2.setNumThreads(0), set in the
main process and again in worker_init_fn, and OMP/OPENBLAS/MKL_NUM_THREADS=1 for numpy.
Prints "python workers N: X images/s, Y CPU ms/image" per count (CPU time of the main process
and its workers), timed after a warm-up batch, as our loader_benchmark prints its lines.
"""
import argparse
import glob
import os
import re
import time
import warnings

# One thread per worker for numpy's BLAS too (set before numpy loads it): its spinning
# helper threads would otherwise compete with the other workers.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import cv2
import numpy as np
import pyclipper
import torch
from torch.utils.data import DataLoader, Dataset

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
SHRINK_RATIO, THRESH_MIN, THRESH_MAX, MIN_TEXT_SIZE = 0.4, 0.3, 0.7, 8


def read_ground_truth(path):
    polygons, ignore = [], []
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) < 9:
                continue
            polygons.append(np.array(parts[:8], np.float32).reshape(4, 2))
            ignore.append(",".join(parts[8:]) == "###")
    return polygons, ignore


def color_jitter(image, rng, brightness=0.125, saturation=0.5):
    b = rng.uniform(1 - brightness, 1 + brightness)
    s = rng.uniform(max(0.0, 1 - saturation), 1 + saturation)
    out = image.astype(np.float32)
    for op in rng.permutation(2):
        if op == 0:
            out *= b
        else:
            gray = cv2.cvtColor(out, cv2.COLOR_BGR2GRAY)[..., None]
            out = out * s + gray * (1 - s)
        np.clip(out, 0, 255, out=out)
    return np.rint(out).astype(np.uint8)


def gap_positions(extent, window, spans):
    blocked = np.zeros(extent + 1, bool)
    for begin, end in spans:
        first, last = max(0, int(np.floor(begin)) + 1), min(extent, int(np.ceil(end)) - 1)
        if first <= last:
            blocked[first:last + 1] = True
    positions = np.arange(0, extent - window + 1)
    return positions[~blocked[positions] & ~blocked[positions + window]]


def choose_crop(width, height, window_w, window_h, boxes, wanted, rng, tries=50):
    x_gaps = gap_positions(width, window_w, boxes[:, [0, 2]])
    y_gaps = gap_positions(height, window_h, boxes[:, [1, 3]])
    best, best_score = (0, 0), None
    for _ in range(tries):
        x = int(rng.choice(x_gaps)) if len(x_gaps) else int(rng.integers(0, width - window_w + 1))
        y = int(rng.choice(y_gaps)) if len(y_gaps) else int(rng.integers(0, height - window_h + 1))
        overlaps = ((boxes[:, 0] < x + window_w) & (boxes[:, 2] > x) &
                    (boxes[:, 1] < y + window_h) & (boxes[:, 3] > y))
        inside = ((boxes[:, 0] >= x) & (boxes[:, 1] >= y) &
                  (boxes[:, 2] <= x + window_w) & (boxes[:, 3] <= y + window_h))
        cuts = int((overlaps & ~inside).sum())
        score = (-cuts, bool((inside & wanted).any()))
        if best_score is None or score > best_score:
            best, best_score = (x, y), score
        if cuts == 0 and (score[1] or not wanted.any()):
            break
    return best


def polygon_area_perimeter(polygon):
    x, y = polygon[:, 0], polygon[:, 1]
    area = 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(np.roll(x, -1), y))
    perimeter = np.linalg.norm(polygon - np.roll(polygon, -1, axis=0), axis=1).sum()
    return area, perimeter


def segment_distance(xs, ys, point_1, point_2):
    """MhLiao/DB's MakeBorderMap.distance: the distance to segment point_1 point_2 (the caller
    silences the 0 / 0 warnings of pixels on a vertex and of degenerate segments, which the
    reference prints)."""
    square_distance_1 = np.square(xs - point_1[0]) + np.square(ys - point_1[1])
    square_distance_2 = np.square(xs - point_2[0]) + np.square(ys - point_2[1])
    square_distance = np.square(point_1[0] - point_2[0]) + np.square(point_1[1] - point_2[1])
    cosin = (square_distance - square_distance_1 - square_distance_2) / (
        2 * np.sqrt(square_distance_1 * square_distance_2))
    square_sin = np.nan_to_num(1 - np.square(cosin))
    result = np.sqrt(square_distance_1 * square_distance_2 * square_sin / square_distance)
    result[cosin < 0] = np.sqrt(np.fmin(square_distance_1, square_distance_2))[cosin < 0]
    return result


def draw_border_map(polygon, canvas, mask):
    """MhLiao/DB's MakeBorderMap.draw_border_map."""
    polygon = polygon.copy()
    area, perimeter = polygon_area_perimeter(polygon)
    if area <= 0:
        return
    distance = area * (1 - SHRINK_RATIO ** 2) / perimeter
    padding = pyclipper.PyclipperOffset()
    padding.AddPath([tuple(p) for p in polygon], pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    padded = np.array(padding.Execute(distance)[0])
    cv2.fillPoly(mask, [padded.astype(np.int32)], 1.0)
    xmin, xmax = padded[:, 0].min(), padded[:, 0].max()
    ymin, ymax = padded[:, 1].min(), padded[:, 1].max()
    width, height = xmax - xmin + 1, ymax - ymin + 1
    polygon[:, 0] -= xmin
    polygon[:, 1] -= ymin
    xs = np.broadcast_to(np.linspace(0, width - 1, num=width).reshape(1, width), (height, width))
    ys = np.broadcast_to(np.linspace(0, height - 1, num=height).reshape(height, 1), (height, width))
    distance_map = np.zeros((polygon.shape[0], height, width), dtype=np.float32)
    for i in range(polygon.shape[0]):
        j = (i + 1) % polygon.shape[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            absolute_distance = segment_distance(xs, ys, polygon[i], polygon[j])
            distance_map[i] = np.clip(absolute_distance / distance, 0, 1)
    distance_map = distance_map.min(axis=0)
    xmin_valid = min(max(0, xmin), canvas.shape[1] - 1)
    xmax_valid = min(max(0, xmax), canvas.shape[1] - 1)
    ymin_valid = min(max(0, ymin), canvas.shape[0] - 1)
    ymax_valid = min(max(0, ymax), canvas.shape[0] - 1)
    canvas[ymin_valid:ymax_valid + 1, xmin_valid:xmax_valid + 1] = np.fmax(
        1 - distance_map[ymin_valid - ymin:ymax_valid - ymax + height,
                         xmin_valid - xmin:xmax_valid - xmax + width],
        canvas[ymin_valid:ymax_valid + 1, xmin_valid:xmax_valid + 1])


def db_targets(polygons, ignore, height, width):
    """MhLiao/DB's MakeSegDetectionData (shrunk text, training mask) and MakeBorderMap."""
    gt = np.zeros((height, width), np.float32)
    mask = np.ones((height, width), np.float32)
    canvas = np.zeros((height, width), np.float32)
    thresh_mask = np.zeros((height, width), np.float32)
    for polygon, ignored in zip(polygons, ignore):
        polygon = polygon.copy()
        polygon[:, 0] = np.clip(polygon[:, 0], 0, width - 1)
        polygon[:, 1] = np.clip(polygon[:, 1], 0, height - 1)
        area, perimeter = polygon_area_perimeter(polygon)
        size = min(np.ptp(polygon[:, 0]), np.ptp(polygon[:, 1]))
        shrunk = []
        if not ignored and area >= 1 and size >= MIN_TEXT_SIZE:
            distance = area * (1 - SHRINK_RATIO ** 2) / perimeter
            padding = pyclipper.PyclipperOffset()
            padding.AddPath([tuple(p) for p in polygon], pyclipper.JT_ROUND,
                            pyclipper.ET_CLOSEDPOLYGON)
            shrunk = padding.Execute(-distance)
        if not shrunk:
            cv2.fillPoly(mask, [polygon.astype(np.int32)], 0)
            continue
        cv2.fillPoly(gt, [np.array(shrunk[0]).reshape(-1, 2).astype(np.int32)], 1)
        draw_border_map(polygon, canvas, thresh_mask)
    thresh_map = canvas * (THRESH_MAX - THRESH_MIN) + THRESH_MIN
    return gt, mask, thresh_map, thresh_mask


class DBNetIcdarDataset(Dataset):
    def __init__(self, root, size=640, seed=42):
        images = glob.glob(os.path.join(root, "ch4_training_images", "img_*.jpg"))
        self.images = sorted(images, key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
        self.gt_dir = os.path.join(root, "ch4_training_localization_transcription_gt")
        self.size, self.seed = size, seed

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        rng = np.random.default_rng([self.seed, index])
        path = self.images[index]
        image = cv2.imread(path, cv2.IMREAD_COLOR)
        polygons, ignore = read_ground_truth(
            os.path.join(self.gt_dir, "gt_" + os.path.splitext(os.path.basename(path))[0] + ".txt"))
        polygons = np.array(polygons, np.float32).reshape(-1, 4, 2)
        ignore = np.array(ignore, bool)

        image = color_jitter(image, rng)
        h, w = image.shape[:2]
        if rng.random() < 0.5:
            image = cv2.flip(image, 1)
            polygons[:, :, 0] = w - polygons[:, :, 0]
        m = cv2.getRotationMatrix2D((w / 2, h / 2), rng.uniform(-10, 10), 1.0)
        image = cv2.warpAffine(image, m, (w, h), flags=cv2.INTER_LINEAR, borderValue=0)
        polygons = polygons @ m[:, :2].T.astype(np.float32) + m[:, 2].astype(np.float32)
        scale = rng.uniform(0.5, 3.0)
        new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
        image = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
        polygons *= np.array([new_w / w, new_h / h], np.float32)

        s = self.size
        window_w, window_h = min(s, new_w), min(s, new_h)
        boxes = np.concatenate([polygons.min(axis=1), polygons.max(axis=1)], axis=1)
        x, y = choose_crop(new_w, new_h, window_w, window_h, boxes, ~ignore, rng)
        crop = np.zeros((s, s, 3), np.uint8)
        crop[:window_h, :window_w] = image[y:y + window_h, x:x + window_w]
        polygons -= np.array([x, y], np.float32)
        visible = ((polygons[:, :, 0].max(axis=1) > 0) & (polygons[:, :, 0].min(axis=1) < s) &
                   (polygons[:, :, 1].max(axis=1) > 0) & (polygons[:, :, 1].min(axis=1) < s))
        polygons, ignore = polygons[visible], ignore[visible]

        rgb = cv2.cvtColor(crop, cv2.COLOR_BGR2RGB).astype(np.float32)
        normalized = (rgb / 255.0 - MEAN) / STD
        gt, mask, thresh_map, thresh_mask = db_targets(polygons, ignore, s, s)
        return {
            "image": torch.from_numpy(normalized).permute(2, 0, 1),
            "gt": torch.from_numpy(gt),
            "mask": torch.from_numpy(mask),
            "thresh_map": torch.from_numpy(thresh_map),
            "thresh_mask": torch.from_numpy(thresh_mask),
        }


def cpu_seconds(loader):
    """CPU time of this process and of the loader's (persistent) worker processes."""
    total = time.process_time()
    # The worker processes are private to the iterator; their pids are what /proc needs.
    for worker in loader._iterator._workers:
        with open(f"/proc/{worker.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def one_thread(_worker_id=None):
    torch.set_num_threads(1)
    cv2.setNumThreads(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--threads", default="1,2,4")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--size", type=int, default=640, help="crop size")
    args = parser.parse_args()
    one_thread()
    # DataLoader warns about more workers than cores; the 4-worker run does that on purpose.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    dataset = DBNetIcdarDataset(args.data_dir, size=args.size)
    print(f"python: {len(dataset)} images, batch {args.batch}, {args.epochs} epoch(s) per worker "
          f"count; torch {torch.__version__}, OpenCV {cv2.__version__}, numpy {np.__version__}")
    for workers in [int(t) for t in args.threads.split(",")]:
        loader = DataLoader(dataset, batch_size=args.batch, shuffle=False, num_workers=workers,
                            drop_last=True, worker_init_fn=one_thread, persistent_workers=True)
        images, start, start_cpu = 0, None, 0.0
        for _ in range(args.epochs):
            for batch in loader:
                if start is None:  # the warm-up batch, with the workers' start, is not counted
                    start, start_cpu = time.perf_counter(), cpu_seconds(loader)
                    continue
                images += batch["image"].shape[0]
        seconds = time.perf_counter() - start
        cpu = cpu_seconds(loader) - start_cpu
        print(f"python workers {workers}: {images / seconds:.1f} images/s, "
              f"{1e3 * cpu / images:.1f} CPU ms/image "
              f"({images} images in {seconds:.2f} s after a warm-up batch)", flush=True)
        del loader


if __name__ == "__main__":
    main()
