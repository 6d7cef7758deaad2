// Writes a COCO instances file shaped like instances_train2017.json, without images (see
// coco_scale.h), for benchmarks/coco_load.sh:
//
//   bazel run //data/synthetic/coco:make_coco_scale_annotations --
//       --output=/tmp/instances_train2017_shaped.json   (one line)
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "data/synthetic/coco/coco_scale.h"

ABSL_FLAG(std::string, output, "", "The JSON file to write (must not exist).");
ABSL_FLAG(int64_t, num_images, 118287, "Images (train2017 has 118,287).");
ABSL_FLAG(double, compressed_rle_fraction, 0.0,
          "Fraction of the crowd regions written as compressed RLE strings.");
ABSL_FLAG(uint64_t, seed, 1, "Seed; the same seed gives a byte-identical file.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes a train2017-shaped COCO instances file without images.\n"
      "Usage: make_coco_scale_annotations --output=FILE [--num_images=N --seed=S]");
  absl::ParseCommandLine(argc, argv);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output.empty()) {
    std::cerr << "--output is required\n";
    return 2;
  }
  vision::data::synthetic::coco::CocoScaleOptions options;
  options.num_images = absl::GetFlag(FLAGS_num_images);
  options.compressed_rle_fraction = absl::GetFlag(FLAGS_compressed_rle_fraction);
  options.seed = absl::GetFlag(FLAGS_seed);
  const absl::Time start = absl::Now();
  vision::data::synthetic::coco::CocoScaleSummary summary;
  if (absl::Status status =
          vision::data::synthetic::coco::WriteCocoScaleAnnotations(options, output, &summary);
      !status.ok()) {
    std::cerr << "make_coco_scale_annotations: " << status << "\n";
    return 1;
  }
  std::cout << "Wrote " << output << ": " << summary.images << " images, " << summary.annotations
            << " annotations (" << summary.crowd << " crowd, " << summary.polygons << " polygons, "
            << summary.points << " points), " << summary.bytes / 1000000 << " MB in "
            << absl::FormatDuration(absl::Now() - start) << "\n";
  return 0;
}
