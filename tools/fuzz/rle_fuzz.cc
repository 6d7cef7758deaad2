// Fuzzes the run-length codec (core/run_length_mask.h): COCO's compressed counts strings, and
// masks given as runs. Round trips must be exact: a decoded string re-encodes to runs that
// decode to the same runs, and a decoded mask re-encodes to the same pixels.
//
// Input: byte 0 selects nothing (kept for corpus stability); the whole input is also tried as a
// counts string. From byte 1: height and width (1..64 each), then the runs, one byte each.
#include <cstddef>
#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/run_length_mask.h"
#include "core/sample.h"
#include "tools/fuzz/fuzz_util.h"

namespace {

using vision::core::RunLengthMask;

void CheckMaskRoundTrip(const RunLengthMask& rle) {
  auto mask = vision::core::DecodeRle(rle);
  if (!mask.ok()) return;
  VISION_FUZZ_CHECK(mask->rows == rle.height && mask->cols == rle.width);
  const RunLengthMask again = vision::core::EncodeRle(*mask);
  auto mask_again = vision::core::DecodeRle(again);
  VISION_FUZZ_CHECK(mask_again.ok());
  VISION_FUZZ_CHECK(cv::countNonZero(*mask != *mask_again) == 0);
  VISION_FUZZ_CHECK(vision::core::RleArea(again) == cv::countNonZero(*mask));
  const RunLengthMask both = vision::core::RleUnion(rle, again);
  VISION_FUZZ_CHECK(vision::core::RleArea(both) == cv::countNonZero(*mask));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vision::core;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto counts = DecodeCocoRleString(text);
  if (counts.ok()) {
    const std::string encoded = EncodeCocoRleString(*counts);
    auto decoded = DecodeCocoRleString(encoded);
    VISION_FUZZ_CHECK(decoded.ok());
    VISION_FUZZ_CHECK(*decoded == *counts);
    // As a mask of one column, when the runs fit a small one.
    uint64_t total = 0;
    for (uint32_t run : *counts) total += run;
    if (total > 0 && total <= 4096) {
      RunLengthMask rle;
      rle.height = static_cast<int>(total);
      rle.width = 1;
      rle.counts = *counts;
      CheckMaskRoundTrip(rle);
    }
  } else {
    VISION_FUZZ_CHECK(!counts.status().message().empty());
  }
  if (size < 3) return 0;
  RunLengthMask rle;
  rle.height = data[1] % 64 + 1;
  rle.width = data[2] % 64 + 1;
  for (size_t i = 3; i < size; ++i) rle.counts.push_back(data[i]);
  CheckMaskRoundTrip(rle);
  // The same bytes as polygon coordinates, in the range annotations reach (up to half the
  // image beyond each border).
  std::vector<double> xy;
  for (size_t i = 3; i + 1 < size; i += 2) {
    const double unit = ((data[i] << 8) | data[i + 1]) / 65535.0;  // 0..1
    const int extent = xy.size() % 2 == 0 ? rle.width : rle.height;
    xy.push_back((unit * 2.0 - 0.5) * extent);
  }
  if (xy.size() % 2 == 1) xy.pop_back();
  if (xy.size() >= 6) {
    const RunLengthMask polygon = RleFromPolygonCoordinates(xy, rle.height, rle.width);
    VISION_FUZZ_CHECK(polygon.height == rle.height && polygon.width == rle.width);
    uint64_t pixels = 0;
    for (uint32_t run : polygon.counts) pixels += run;
    VISION_FUZZ_CHECK(pixels == static_cast<uint64_t>(rle.height) * rle.width);
    CheckMaskRoundTrip(polygon);
  }
  return 0;
}
