#include "data/augmentations/rle.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace vision::data::augmentations {

absl::StatusOr<cv::Mat> DecodeRle(const core::RunLengthMask& rle) {
  if (rle.height <= 0 || rle.width <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("RLE mask has size ", rle.height, "x",
                                                   rle.width, "; both sides must be positive"));
  }
  const int64_t total = static_cast<int64_t>(rle.height) * rle.width;
  // Decode column-major into the transpose (W rows of H), whose memory order is the RLE's.
  cv::Mat transposed(rle.width, rle.height, CV_8U, cv::Scalar(0));
  uint8_t* data = transposed.ptr<uint8_t>();
  int64_t position = 0;
  for (size_t i = 0; i < rle.counts.size(); ++i) {
    const int64_t run = rle.counts[i];
    if (position + run > total) {
      return absl::InvalidArgumentError(
          absl::StrCat("RLE counts exceed the mask's ", rle.height, "x", rle.width, " = ", total,
                       " pixels at run ", i, "; the counts do not belong to this size"));
    }
    if (i % 2 == 1) std::fill(data + position, data + position + run, uint8_t{1});
    position += run;
  }
  if (position != total) {
    return absl::InvalidArgumentError(absl::StrCat("RLE counts cover ", position, " of the mask's ",
                                                   total, " pixels; they must cover all"));
  }
  return cv::Mat(transposed.t());
}

core::RunLengthMask EncodeRle(const cv::Mat& mask) {
  CV_Assert(mask.type() == CV_8U);
  core::RunLengthMask rle;
  rle.height = mask.rows;
  rle.width = mask.cols;
  const cv::Mat transposed = mask.t();
  const uint8_t* data = transposed.ptr<uint8_t>();
  const int64_t total = static_cast<int64_t>(mask.rows) * mask.cols;
  bool foreground = false;
  uint32_t run = 0;
  for (int64_t i = 0; i < total; ++i) {
    if ((data[i] != 0) != foreground) {
      rle.counts.push_back(run);
      foreground = !foreground;
      run = 0;
    }
    ++run;
  }
  rle.counts.push_back(run);
  return rle;
}

}  // namespace vision::data::augmentations
