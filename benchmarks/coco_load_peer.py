"""The Python side of benchmarks/coco_load.sh: pycocotools' COCO(annotation_file), i.e.
json.load plus its index (imgs, anns, cats, imgToAnns, catToImgs), as a training script opens
COCO. Prints the seconds and the peak RSS (ru_maxrss) of the process."""
import contextlib
import io
import resource
import sys
import time

from pycocotools.coco import COCO


def main():
    path = sys.argv[1]
    start = time.perf_counter()
    cpu_start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):  # COCO() prints its progress
        coco = COCO(path)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"python seconds {seconds:.3f} cpu_seconds {cpu_seconds:.3f} samples {len(coco.imgs)} peak_rss_mib {peak_mib:.0f}")


if __name__ == "__main__":
    main()
