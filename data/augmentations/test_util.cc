#include "data/augmentations/test_util.h"

#include <algorithm>

#include <opencv2/imgproc.hpp>

#include "google/protobuf/any.pb.h"

namespace vision::data::augmentations::testing {

cv::Mat Rasterize(const core::Polygon& polygon, cv::Size size) {
  cv::Mat mask(size, CV_8U, cv::Scalar(0));
  if (polygon.size() < 3) return mask;
  // Only pixels inside the polygon's bounds can be inside it.
  const cv::Rect bounds = cv::boundingRect(polygon) & cv::Rect(0, 0, size.width, size.height);
  for (int r = bounds.y; r < bounds.y + bounds.height; ++r) {
    for (int c = bounds.x; c < bounds.x + bounds.width; ++c) {
      if (cv::pointPolygonTest(polygon, cv::Point2f(c + 0.5f, r + 0.5f), false) >= 0) {
        mask.at<uint8_t>(r, c) = 1;
      }
    }
  }
  return mask;
}

double MaskIoU(const cv::Mat& a, const cv::Mat& b) {
  const int intersection = cv::countNonZero(a & b);
  const int uni = cv::countNonZero(a | b);
  return uni == 0 ? 1.0 : static_cast<double>(intersection) / uni;
}

bool WithinBoundaryTolerance(const cv::Mat& a, const cv::Mat& b, int radius) {
  const cv::Mat kernel = cv::Mat::ones(2 * radius + 1, 2 * radius + 1, CV_8U);
  cv::Mat a_grown, b_grown;
  cv::dilate(a != 0, a_grown, kernel);
  cv::dilate(b != 0, b_grown, kernel);
  return cv::countNonZero((a != 0) & ~b_grown) == 0 && cv::countNonZero((b != 0) & ~a_grown) == 0;
}

absl::StatusOr<std::unique_ptr<core::Augmentation>> MakeAugmentation(
    const std::string& name, const google::protobuf::Message& options) {
  google::protobuf::Any any;
  any.PackFrom(options);
  return core::AugmentationRegistry::Get().Create(name, any);
}

cv::Rect2f PointBounds(const std::vector<cv::Point2f>& points) {
  float x0 = points.at(0).x, x1 = x0, y0 = points[0].y, y1 = y0;
  for (const cv::Point2f& p : points) {
    x0 = std::min(x0, p.x);
    x1 = std::max(x1, p.x);
    y0 = std::min(y0, p.y);
    y1 = std::max(y1, p.y);
  }
  return cv::Rect2f(x0, y0, x1 - x0, y1 - y0);
}

core::Polygon Rect(float x, float y, float width, float height) {
  return {{x, y}, {x + width, y}, {x + width, y + height}, {x, y + height}};
}

}  // namespace vision::data::augmentations::testing
