#include "core/palette.h"

#include <opencv2/imgproc.hpp>

namespace vision::core {

cv::Scalar ClassColour(int label) {
  cv::Mat hsv(1, 1, CV_8UC3, cv::Scalar((label * 137) % 180, 220, 255)), bgr;
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
  const cv::Vec3b c = bgr.at<cv::Vec3b>(0, 0);
  return cv::Scalar(c[0], c[1], c[2]);
}

cv::Mat ColourLabelMap(const cv::Mat& labels,
                       const std::vector<std::array<uint8_t, 3>>& palette_rgb) {
  cv::Mat lut(1, 256, CV_8UC3, cv::Scalar(0, 0, 0));  // 255 (ignore) black
  for (int id = 0; id < 255; ++id) {
    if (id < static_cast<int>(palette_rgb.size())) {
      const std::array<uint8_t, 3>& rgb = palette_rgb[id];
      lut.at<cv::Vec3b>(0, id) = cv::Vec3b(rgb[2], rgb[1], rgb[0]);
    } else {
      const cv::Scalar c = ClassColour(id);
      lut.at<cv::Vec3b>(0, id) = cv::Vec3b(c[0], c[1], c[2]);
    }
  }
  cv::Mat ids3, coloured;
  cv::cvtColor(labels, ids3, cv::COLOR_GRAY2BGR);
  cv::LUT(ids3, lut, coloured);
  return coloured;
}

}  // namespace vision::core
