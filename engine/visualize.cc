#include "engine/visualize.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

absl::Status WritePrediction(const std::string& dir, const core::Sample& prediction,
                             const core::Sample& truth, bool draw) {
  const std::string stem = std::filesystem::path(truth.image_path).stem().string();
  const std::filesystem::path base(dir);
  std::ofstream out(base / absl::StrCat("res_", stem, ".txt"));
  for (const core::TextInstance& t : prediction.texts) {
    std::vector<std::string> coords;
    for (const cv::Point2f& p : t.polygon) {
      coords.push_back(absl::StrCat(cvRound(p.x)));
      coords.push_back(absl::StrCat(cvRound(p.y)));
    }
    out << absl::StrJoin(coords, ",") << "\n";
  }
  if (!out) return absl::InternalError(absl::StrCat("cannot write results for ", stem, " in ", dir));
  if (!draw) return absl::OkStatus();
  absl::StatusOr<cv::Mat> image = DrawPrediction(prediction, truth);
  if (!image.ok()) return image.status();
  const std::string png = (base / absl::StrCat(stem, ".png")).string();
  if (!cv::imwrite(png, *image)) return absl::InternalError(absl::StrCat("cannot write ", png));
  return absl::OkStatus();
}

}  // namespace vision::engine
