// Fuzzes core::DecodeImage as the datasets call it (images IMREAD_COLOR, label maps
// IMREAD_UNCHANGED) and with IMREAD_GRAYSCALE. A refused input must be a DataLoss error with a
// message; an accepted JPEG, which DecodeImage decodes with libjpeg itself, must come out exactly
// as cv::imdecode decodes it (same size, type and pixels).
#include <cstddef>
#include <cstdint>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "absl/strings/string_view.h"
#include "core/image_io.h"
#include "tools/fuzz/fuzz_util.h"

namespace {

// Whether the input has an arithmetic-coded frame header (SOF9-11, SOF13-15) or arithmetic
// conditioning (DAC). DecodeImage's bound of blocks by the file's bits holds only for Huffman
// coding, so a few hundred bytes of arithmetic-coded JPEG may legitimately claim up to 2^30
// pixels and allocate gigabytes (a known gap, README "Bad data"); the fuzzer skips them rather
// than report that as out-of-memory.
bool ArithmeticCoded(const uint8_t* data, size_t size) {
  for (size_t i = 0; i + 1 < size; ++i) {
    if (data[i] == 0xFF && data[i + 1] >= 0xC9 && data[i + 1] <= 0xCF) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (vision::core::SniffImageFormat(bytes) == "JPEG" && ArithmeticCoded(data, size)) return 0;
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
