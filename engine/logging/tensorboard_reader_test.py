"""Reads what TensorBoardWriter writes with the real tensorboard package's EventAccumulator.

Run with the project's venv python (tools/setup.sh installs tensorboard==2.21.0):
  python3 tensorboard_reader_test.py <write_tensorboard_events binary> <scratch dir>
This script chooses every value, has the C++ writer write them (as float32 bit patterns and raw
pixel bytes, see write_tensorboard_events.cc), and checks that TensorBoard reads back every tag,
step and bit of every value, and images of the declared size whose decoded pixels are the ones
written (BGR in, RGB PNG out).
"""

import io
import os
import random
import struct
import subprocess
import sys
import time
import unittest

from PIL import Image
from tensorboard.backend.event_processing import event_accumulator

WRITER = None
SCRATCH = None


def f32_bits(value):
    return struct.unpack("<I", struct.pack("<f", value))[0]


# tag -> [(step, float32 bit pattern)], steps increasing as the trainer writes them.
SCALARS = {
    "train/loss": [(0, f32_bits(2.5)), (1, f32_bits(1.2345678)), (2, f32_bits(0.1)),
                   (1000, f32_bits(1e-7))],
    "train/lr": [(0, f32_bits(0.0)), (1, 0x80000000), (2, f32_bits(6.9e-3))],  # 0x80000000: -0.0
    "extremes": [
        (0, 0x7F7FFFFF),  # largest float32
        (1, 0xFF7FFFFF),  # most negative float32
        (2, 0x00000001),  # smallest subnormal
        (3, f32_bits(-1e30)),
        (4, f32_bits(-123456.789)),
        (5, 0x7F800000),  # +inf
        (6, 0xFF800000),  # -inf
        (7, 0x7FC00000),  # the quiet NaN a diverged loss produces
    ],
    "steps/large": [(2**31, f32_bits(-3.0)), (2**40, f32_bits(7.0)), (2**62, f32_bits(-1e-3))],
}


def random_pixels(rng, height, width, channels):
    return bytes(rng.randrange(256) for _ in range(height * width * channels))


_rng = random.Random(1234)
# tag -> [(step, height, width, channels, pixels as the writer gets them: row-major, BGR)].
IMAGES = {
    "eval/prediction_0": [(3, 5, 7, 3, random_pixels(_rng, 5, 7, 3)),
                          (6, 2, 9, 3, random_pixels(_rng, 2, 9, 3))],
    "eval/mask": [(3, 4, 3, 1, random_pixels(_rng, 4, 3, 1))],
}


def commands():
    lines = []
    for tag, points in SCALARS.items():
        lines += ["scalar %s %d %08x" % (tag, step, bits) for step, bits in points]
    for tag, images in IMAGES.items():
        lines += ["image %s %d %d %d %d %s" % (tag, step, h, w, c, pixels.hex())
                  for step, h, w, c, pixels in images]
    return "".join(line + "\n" for line in lines)


class TensorBoardReaderTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        log_dir = os.path.join(SCRATCH, "tensorboard")
        cls.start = time.time()
        result = subprocess.run([WRITER, log_dir], input=commands(), capture_output=True,
                                text=True, check=True)
        cls.end = time.time()
        cls.path = result.stdout.strip()
        # size_guidance 0 keeps every event instead of a reservoir sample.
        cls.acc = event_accumulator.EventAccumulator(
            log_dir, size_guidance={k: 0 for k in event_accumulator.DEFAULT_SIZE_GUIDANCE})
        cls.acc.Reload()

    def test_one_file_of_version_2(self):
        self.assertEqual(os.listdir(os.path.dirname(self.path)), [os.path.basename(self.path)])
        self.assertEqual(self.acc.file_version, 2.0)

    def test_tags(self):
        tags = self.acc.Tags()
        self.assertCountEqual(tags[event_accumulator.SCALARS], SCALARS)
        self.assertCountEqual(tags[event_accumulator.IMAGES], IMAGES)

    def test_scalars_bit_exact(self):
        for tag, points in SCALARS.items():
            events = self.acc.Scalars(tag)
            self.assertEqual([e.step for e in events], [step for step, _ in points], tag)
            for event, (step, bits) in zip(events, points):
                self.assertEqual("%08x" % f32_bits(event.value), "%08x" % bits,
                                 "%s at step %d: read %r" % (tag, step, event.value))

    def test_wall_times_are_unix_seconds(self):
        for tag in SCALARS:
            for event in self.acc.Scalars(tag):
                self.assertGreaterEqual(event.wall_time, self.start - 1, tag)
                self.assertLessEqual(event.wall_time, self.end + 1, tag)

    def test_images(self):
        for tag, expected in IMAGES.items():
            events = self.acc.Images(tag)
            self.assertEqual([e.step for e in events], [e[0] for e in expected], tag)
            for event, (step, height, width, channels, pixels) in zip(events, expected):
                where = "%s at step %d" % (tag, step)
                self.assertEqual((event.height, event.width), (height, width), where)
                png = Image.open(io.BytesIO(event.encoded_image_string))
                self.assertEqual(png.format, "PNG", where)
                self.assertEqual(png.size, (width, height), where)
                if channels == 3:
                    self.assertEqual(png.mode, "RGB", where)
                    # The writer was given BGR; the PNG must hold the same pixels as RGB.
                    want = bytearray(pixels)
                    want[0::3], want[2::3] = pixels[2::3], pixels[0::3]
                else:
                    self.assertEqual(png.mode, "L", where)
                    want = pixels
                self.assertEqual(png.tobytes(), bytes(want), where)


if __name__ == "__main__":
    WRITER, SCRATCH = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
