// Writes a synthetic semantic-segmentation dataset in the Cityscapes layout (see
// synthetic_cityscapes.h):
//
//   bazel run //data/synthetic/cityscapes:make_synthetic_cityscapes -- --output_dir=/tmp/city
//       --num_train=200 --num_val=50 --width=256 --height=128 --seed=1
//
// then point a Cityscapes dataset at it: options { [type.googleapis.com/
// vision.data.datasets.CityscapesOptions] { root: "/tmp/city" split: "train" } }.
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "data/synthetic/cityscapes/synthetic_cityscapes.h"

ABSL_FLAG(std::string, output_dir, "", "Directory to create the dataset in (new or empty).");
ABSL_FLAG(int, num_train, 100, "Images in the train split.");
ABSL_FLAG(int, num_val, 20, "Images in the val split.");
ABSL_FLAG(int, num_cities, 2, "Cities per split (1-4).");
ABSL_FLAG(int, width, 256, "Image width in pixels.");
ABSL_FLAG(int, height, 128, "Image height in pixels.");
ABSL_FLAG(uint64_t, seed, 1, "Seed; the same seed gives byte-identical files.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes a synthetic semantic-segmentation dataset in the Cityscapes layout.\n"
      "Usage: make_synthetic_cityscapes --output_dir=DIR [--num_train=N --num_val=N "
      "--num_cities=N --width=W --height=H --seed=S]");
  absl::ParseCommandLine(argc, argv);
  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  if (output_dir.empty()) {
    std::cerr << "--output_dir is required\n";
    return 2;
  }
  vision::data::synthetic::cityscapes::SyntheticCityscapesOptions options;
  options.num_train = absl::GetFlag(FLAGS_num_train);
  options.num_val = absl::GetFlag(FLAGS_num_val);
  options.num_cities = absl::GetFlag(FLAGS_num_cities);
  options.width = absl::GetFlag(FLAGS_width);
  options.height = absl::GetFlag(FLAGS_height);
  options.seed = absl::GetFlag(FLAGS_seed);

  const absl::Time start = absl::Now();
  if (absl::Status status =
          vision::data::synthetic::cityscapes::WriteSyntheticCityscapes(options, output_dir);
      !status.ok()) {
    std::cerr << "make_synthetic_cityscapes: " << status << "\n";
    return 1;
  }
  std::cout << "Wrote " << options.num_train << " train and " << options.num_val
            << " val images of " << options.width << "x" << options.height << " to " << output_dir
            << " in " << absl::FormatDuration(absl::Now() - start) << "\n";
  return 0;
}
