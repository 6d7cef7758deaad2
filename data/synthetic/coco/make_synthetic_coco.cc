// Writes a synthetic instance-segmentation dataset in the COCO layout (see synthetic_coco.h):
//
//   bazel run //data/synthetic/coco:make_synthetic_coco -- --output_dir=/tmp/shapes
//       --num_train=1000 --num_val=200 --size=256 --seed=1
//
// then point a COCO dataset at it: options { [type.googleapis.com/
// vision.data.datasets.CocoOptions] { root: "/tmp/shapes" } } for the train split, with
// annotation_file: "annotations/instances_val2017.json" image_dir: "val2017" for val.
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "data/synthetic/coco/synthetic_coco.h"

ABSL_FLAG(std::string, output_dir, "", "Directory to create the dataset in (new or empty).");
ABSL_FLAG(int, num_train, 1000, "Images in the train split (train2017).");
ABSL_FLAG(int, num_val, 200, "Images in the val split (val2017).");
ABSL_FLAG(int, size, 256, "Width and height of the images in pixels.");
ABSL_FLAG(uint64_t, seed, 1, "Seed; the same seed gives byte-identical files.");
ABSL_FLAG(int, min_objects, 1, "Fewest shapes attempted per (non-empty) image.");
ABSL_FLAG(int, max_objects, 8, "Most shapes attempted per image.");
ABSL_FLAG(double, empty_fraction, 0.1, "Fraction of images without objects.");
ABSL_FLAG(double, crowd_fraction, 0.25, "Fraction of non-empty images with a crowd region.");
ABSL_FLAG(int, jpeg_quality, 90, "JPEG quality, 1-100.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes a synthetic instance-segmentation dataset (shapes) in the COCO layout.\n"
      "Usage: make_synthetic_coco --output_dir=DIR [--num_train=N --num_val=N --size=S "
      "--seed=S]");
  absl::ParseCommandLine(argc, argv);
  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  if (output_dir.empty()) {
    std::cerr << "--output_dir is required\n";
    return 2;
  }
  vision::data::synthetic::coco::SyntheticCocoDatasetOptions options;
  options.num_train = absl::GetFlag(FLAGS_num_train);
  options.num_val = absl::GetFlag(FLAGS_num_val);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.jpeg_quality = absl::GetFlag(FLAGS_jpeg_quality);
  options.image.width = absl::GetFlag(FLAGS_size);
  options.image.height = absl::GetFlag(FLAGS_size);
  options.image.min_objects = absl::GetFlag(FLAGS_min_objects);
  options.image.max_objects = absl::GetFlag(FLAGS_max_objects);
  options.image.empty_fraction = absl::GetFlag(FLAGS_empty_fraction);
  options.image.crowd_fraction = absl::GetFlag(FLAGS_crowd_fraction);

  const absl::Time start = absl::Now();
  if (absl::Status status =
          vision::data::synthetic::coco::WriteSyntheticCocoDataset(options, output_dir);
      !status.ok()) {
    std::cerr << "make_synthetic_coco: " << status << "\n";
    return 1;
  }
  std::cout << "Wrote " << options.num_train << " train and " << options.num_val
            << " val images of " << options.image.width << "x" << options.image.height << " to "
            << output_dir << " in " << absl::FormatDuration(absl::Now() - start) << "\n";
  return 0;
}
