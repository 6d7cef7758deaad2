// Fuzzes core::DecodeImage as the datasets call it (images IMREAD_COLOR, label maps
// IMREAD_UNCHANGED) and with IMREAD_GRAYSCALE, under a pixel limit of 2048 x 2048
// (fuzz_util.h). A refused input must be a DataLoss error with a message; an accepted JPEG,
// which DecodeImage decodes with libjpeg itself, must come out exactly as cv::imdecode decodes
// it (same size, type and pixels). Arithmetic-coded JPEGs included: a few hundred bytes of them
// can claim any size (testdata/fuzz/image_decode/regression_arithmetic_*), which the pixel limit
// refuses before anything is allocated.
#include <cstddef>
#include <cstdint>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "absl/strings/string_view.h"
#include "core/image_io.h"
#include "tools/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const vision::core::ScopedMaxImagePixels limit(vision::fuzz::kMaxImagePixels, "max_image_pixels");
  for (const int flags : {cv::IMREAD_COLOR, cv::IMREAD_GRAYSCALE, cv::IMREAD_UNCHANGED}) {
    absl::StatusOr<cv::Mat> decoded = vision::core::DecodeImage(bytes, flags);
    if (!decoded.ok()) {
      VISION_FUZZ_CHECK(decoded.status().code() == absl::StatusCode::kDataLoss &&
                        !decoded.status().message().empty());
      continue;
    }
    VISION_FUZZ_CHECK(!decoded->empty());
    if (vision::core::SniffImageFormat(bytes) != "JPEG") continue;
    const cv::Mat expected =
        cv::imdecode(cv::Mat(1, static_cast<int>(size), CV_8U, const_cast<uint8_t*>(data)), flags);
    VISION_FUZZ_CHECK(expected.size() == decoded->size() && expected.type() == decoded->type());
    VISION_FUZZ_CHECK(cv::norm(expected, *decoded, cv::NORM_INF) == 0);
  }
  return 0;
}
