// Fuzzes the ICDAR2015 ground-truth parser (ParseIcdarGroundTruth: gt_img_N.txt, one
// "x1,y1,...,x4,y4,transcription" line per word), without and with an image size to check
// coordinates against. Every accepted instance must have a 4-point polygon inside the limits.
#include <cstddef>
#include <cstdint>
#include <opencv2/core.hpp>
#include <string>

#include "absl/strings/string_view.h"
#include "data/datasets/icdar2015/icdar2015_dataset.h"
#include "tools/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vision::data::datasets::icdar2015;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  for (const cv::Size image_size : {cv::Size(), cv::Size(1280, 720), cv::Size(1, 1)}) {
    auto instances = ParseIcdarGroundTruth(text, "gt_img_1.txt", image_size);
    if (!instances.ok()) {
      VISION_FUZZ_CHECK(!instances.status().message().empty());
      continue;
    }
    for (const auto& instance : *instances) {
      VISION_FUZZ_CHECK(!instance.polygon.empty());
      if (image_size.area() == 0) continue;
      for (const auto& point : instance.polygon) {
        VISION_FUZZ_CHECK(point.x >= 0 && point.x <= image_size.width);
        VISION_FUZZ_CHECK(point.y >= 0 && point.y <= image_size.height);
      }
    }
  }
  return 0;
}
