#include "engine/visualize.h"

#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"

namespace vision::engine {
namespace {

void DrawPolygon(cv::Mat& image, const core::Polygon& polygon, const cv::Scalar& color) {
  std::vector<cv::Point> points;
  for (const cv::Point2f& p : polygon) points.emplace_back(cvRound(p.x), cvRound(p.y));
  if (points.size() >= 2) cv::polylines(image, points, /*isClosed=*/true, color, 2);
}

void DrawSample(cv::Mat& image, const core::Sample& sample, const cv::Scalar& color) {
  for (const core::TextInstance& t : sample.texts) {
    DrawPolygon(image, t.polygon, t.ignore ? cv::Scalar(160, 160, 160) : color);
  }
  for (const core::ObjectInstance& o : sample.objects) {
    cv::rectangle(image, o.box, color, 2);
    for (const core::Polygon& p : o.polygons) DrawPolygon(image, p, color);
  }
}

}  // namespace

absl::StatusOr<cv::Mat> DrawPrediction(const core::Sample& prediction, const core::Sample& truth) {
  cv::Mat image = cv::imread(truth.image_path, cv::IMREAD_COLOR);
  if (image.empty()) return absl::NotFoundError(absl::StrCat("cannot read ", truth.image_path));
  DrawSample(image, truth, cv::Scalar(0, 0, 255));
  DrawSample(image, prediction, cv::Scalar(0, 200, 0));
  return image;
}

}  // namespace vision::engine
