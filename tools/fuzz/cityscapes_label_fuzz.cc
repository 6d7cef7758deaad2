// Fuzzes the Cityscapes label checks: the input is decoded as the dataset decodes a label map
// (core::DecodeImage, IMREAD_UNCHANGED: any depth and channel count), then checked and mapped by
// ToTrainIds as label ids and as train ids, under the image fuzzers' pixel limit (fuzz_util.h).
// Accepted maps must come back as single-channel 8-bit train ids 0..18 or 255.
#include <cstddef>
#include <cstdint>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <vector>

#include "core/image_io.h"
#include "data/datasets/cityscapes/cityscapes_dataset.h"
#include "data/datasets/cityscapes/cityscapes_labels.h"
#include "tools/fuzz/fuzz_util.h"

namespace {

void Check(const cv::Mat& label_map) {
  using namespace vision::data::datasets::cityscapes;
  for (LabelType type : {LabelType::kLabelIds, LabelType::kLabelTrainIds}) {
    auto train_ids = ToTrainIds(label_map, type, "fuzz_gtFine_labelIds.png");
    if (!train_ids.ok()) {
      VISION_FUZZ_CHECK(!train_ids.status().message().empty());
      continue;
    }
    VISION_FUZZ_CHECK(train_ids->type() == CV_8UC1 && train_ids->size() == label_map.size());
    for (int y = 0; y < train_ids->rows; ++y) {
      for (int x = 0; x < train_ids->cols; ++x) {
        const uint8_t id = train_ids->at<uint8_t>(y, x);
        VISION_FUZZ_CHECK(id < kNumTrainClasses || id == kIgnoreTrainId);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The raw bytes as a small 8-bit map as well, so the checks see every byte value directly.
  if (size > 0) {
    const int cols = static_cast<int>(size < 64 ? size : 64);
    const int rows = static_cast<int>(size / cols);
    cv::Mat raw(rows, cols, CV_8UC1, const_cast<uint8_t*>(data));
    Check(raw);
  }
  const vision::core::ScopedMaxImagePixels limit(vision::fuzz::kMaxImagePixels, "max_image_pixels");
  absl::StatusOr<cv::Mat> decoded =
      vision::core::DecodeImage(absl::string_view(reinterpret_cast<const char*>(data), size),
                                cv::IMREAD_UNCHANGED, "label map");
  if (!decoded.ok()) {
    VISION_FUZZ_CHECK(decoded.status().code() == absl::StatusCode::kDataLoss &&
                      !decoded.status().message().empty());
    return 0;  // ReadImage prefixes the file's path; the dataset reports it as a bad sample.
  }
  VISION_FUZZ_CHECK(!decoded->empty());
  Check(*decoded);
  return 0;
}
