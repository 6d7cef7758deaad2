// Writes a synthetic text-detection dataset in the ICDAR2015 layout (see synthetic_text.h):
//
//   bazel run //data/synthetic:make_synthetic_text -- --output_dir=/tmp/synth
//       --num_train=1000 --num_test=200 --width=320 --height=320 --seed=1
//
// then point an ICDAR2015 dataset at it: options { [type.googleapis.com/
// vision.data.datasets.ICDAR2015Options] { root: "/tmp/synth" split: "train" } }.
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "data/synthetic/synthetic_text.h"

ABSL_FLAG(std::string, output_dir, "", "Directory to create the dataset in (new or empty).");
ABSL_FLAG(int, num_train, 1000, "Images in the train split.");
ABSL_FLAG(int, num_test, 500, "Images in the test split.");
ABSL_FLAG(int, width, 320, "Image width in pixels.");
ABSL_FLAG(int, height, 320, "Image height in pixels.");
ABSL_FLAG(uint64_t, seed, 1, "Seed; the same seed gives byte-identical files.");
ABSL_FLAG(int, min_words, 3, "Fewest words attempted per image.");
ABSL_FLAG(int, max_words, 10, "Most words attempted per image.");
ABSL_FLAG(double, dont_care_fraction, 0.1,
          "Fraction of words made tiny or blurred and marked ### (don't care).");
ABSL_FLAG(int, jpeg_quality, 90, "JPEG quality, 1-100.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes a synthetic text-detection dataset in the ICDAR2015 layout.\n"
      "Usage: make_synthetic_text --output_dir=DIR [--num_train=N --num_test=N --width=W "
      "--height=H --seed=S]");
  absl::ParseCommandLine(argc, argv);
  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  if (output_dir.empty()) {
    std::cerr << "--output_dir is required\n";
    return 2;
  }
  vision::data::synthetic::SyntheticDatasetOptions options;
  options.num_train = absl::GetFlag(FLAGS_num_train);
  options.num_test = absl::GetFlag(FLAGS_num_test);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.jpeg_quality = absl::GetFlag(FLAGS_jpeg_quality);
  options.image.width = absl::GetFlag(FLAGS_width);
  options.image.height = absl::GetFlag(FLAGS_height);
  options.image.min_words = absl::GetFlag(FLAGS_min_words);
  options.image.max_words = absl::GetFlag(FLAGS_max_words);
  options.image.dont_care_fraction = absl::GetFlag(FLAGS_dont_care_fraction);

  const absl::Time start = absl::Now();
  if (absl::Status status = vision::data::synthetic::WriteSyntheticDataset(options, output_dir);
      !status.ok()) {
    std::cerr << "make_synthetic_text: " << status << "\n";
    return 1;
  }
  std::cout << "Wrote " << options.num_train << " train and " << options.num_test
            << " test images of " << options.image.width << "x" << options.image.height << " to "
            << output_dir << " in " << absl::FormatDuration(absl::Now() - start) << "\n";
  return 0;
}
