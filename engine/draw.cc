#include "engine/draw.h"

#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"
#include "core/palette.h"
#include "core/run_length_mask.h"
#include "core/status_macros.h"

namespace vision::engine {
namespace {

const cv::Scalar kGrey(160, 160, 160);

std::vector<cv::Point> Rounded(const core::Polygon& polygon) {
  std::vector<cv::Point> points;
  for (const cv::Point2f& p : polygon) points.emplace_back(cvRound(p.x), cvRound(p.y));
  return points;
}

void DrawPolygon(const core::Polygon& polygon, const cv::Scalar& colour, int thickness,
                 cv::Mat* image) {
  const std::vector<cv::Point> points = Rounded(polygon);
  if (points.size() >= 2) cv::polylines(*image, points, /*isClosed=*/true, colour, thickness, cv::LINE_AA);
}

// The object's mask at the image's size: polygons filled, or the RLE decoded (an RLE of
// another size, which a correct pipeline never makes, draws no mask).
cv::Mat ObjectMask(const core::ObjectInstance& object, const cv::Size& size) {
  cv::Mat mask = cv::Mat::zeros(size, CV_8U);
  for (const core::Polygon& p : object.polygons) {
    cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{Rounded(p)}, cv::Scalar(1));
  }
  if (object.rle.height > 0) {
    absl::StatusOr<cv::Mat> decoded = core::DecodeRle(object.rle);
    if (decoded.ok() && decoded->size() == size) mask |= *decoded;
  }
  return mask;
}

void BlendLabelMap(const cv::Mat& labels, cv::Mat* image) {
  if (labels.size() != image->size()) return;
  cv::addWeighted(*image, 0.5, core::ColourLabelMap(labels), 0.5, 0, *image);
}

void DrawObject(const core::ObjectInstance& o, const DrawOptions& options, cv::Mat* image) {
  const cv::Scalar colour = options.colour.value_or(o.is_crowd ? kGrey : core::ClassColour(o.label));
  if (options.fill) {
    const cv::Mat mask = ObjectMask(o, image->size());
    cv::Mat tinted = image->clone();
    tinted.setTo(colour, mask);
    if (o.is_crowd) {
      // Hatched, so a crowd region reads as "ignored" at a glance.
      for (int d = 0; d < image->cols + image->rows; d += 6) {
        cv::line(tinted, cv::Point(d, 0), cv::Point(d - image->rows, image->rows), cv::Scalar(0, 0, 0));
      }
      image->copyTo(tinted, mask == 0);
    }
    cv::addWeighted(*image, 0.55, tinted, 0.45, 0, *image);
  } else {
    for (const core::Polygon& p : o.polygons) DrawPolygon(p, colour, options.thickness, image);
  }
  cv::rectangle(*image, o.box, colour, options.thickness);
  std::string label = absl::StrCat(o.label, o.is_crowd ? " crowd" : "");
  if (o.score < 1.0f) label += absl::StrCat(" ", static_cast<int>(o.score * 100), "%");
  cv::putText(*image, label, o.box.tl(), cv::FONT_HERSHEY_PLAIN, 0.8, colour);
}

}  // namespace

cv::Mat Displayable(const cv::Mat& image) {
  if (image.depth() == CV_8U) return image.clone();
  std::vector<cv::Mat> channels;
  cv::split(image, channels);
  for (cv::Mat& c : channels) cv::normalize(c, c, 0, 255, cv::NORM_MINMAX, CV_8U);
  cv::Mat rgb, bgr;
  cv::merge(channels, rgb);
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  return bgr;
}

void DrawAnnotations(const core::Sample& sample, const DrawOptions& options, cv::Mat* image) {
  if (options.fill && !sample.semantic.empty()) BlendLabelMap(sample.semantic, image);
  for (const core::TextInstance& t : sample.texts) {
    DrawPolygon(t.polygon, t.ignore ? kGrey : options.colour.value_or(cv::Scalar(0, 220, 0)),
                options.thickness, image);
  }
  for (const core::ObjectInstance& o : sample.objects) DrawObject(o, options, image);
}

cv::Mat WithTargetsBeside(const cv::Mat& image, const std::map<std::string, cv::Mat>& targets) {
  std::vector<cv::Mat> tiles = {image};
  for (const auto& [name, map] : targets) {
    cv::Mat scaled, coloured;
    cv::normalize(map, scaled, 0, 255, cv::NORM_MINMAX, CV_8U);
    cv::applyColorMap(scaled, coloured, cv::COLORMAP_JET);
    cv::putText(coloured, name, cv::Point(3, 12), cv::FONT_HERSHEY_PLAIN, 0.9, cv::Scalar(255, 255, 255));
    tiles.push_back(coloured);
  }
  cv::Mat row;
  cv::hconcat(tiles, row);
  return row;
}

absl::StatusOr<cv::Mat> DrawPrediction(const core::Sample& prediction, const core::Sample& truth) {
  cv::Mat image = cv::imread(truth.image_path, cv::IMREAD_COLOR);
  if (image.empty()) return absl::NotFoundError(absl::StrCat("cannot read ", truth.image_path));
  DrawOptions truth_style;
  truth_style.colour = cv::Scalar(0, 0, 255);
  truth_style.thickness = 2;
  truth_style.fill = false;
  DrawAnnotations(truth, truth_style, &image);
  DrawOptions prediction_style;
  prediction_style.colour = cv::Scalar(0, 200, 0);
  prediction_style.thickness = 2;
  DrawAnnotations(prediction, prediction_style, &image);
  return image;
}

absl::Status WriteDrawing(const std::string& dir, const core::Sample& prediction,
                          const core::Sample& truth) {
  VISION_ASSIGN_OR_RETURN(const cv::Mat image, DrawPrediction(prediction, truth));
  const std::string stem = std::filesystem::path(truth.image_path).stem().string();
  const std::string png = (std::filesystem::path(dir) / absl::StrCat(stem, ".png")).string();
  if (!cv::imwrite(png, image)) return absl::InternalError(absl::StrCat("cannot write ", png));
  return absl::OkStatus();
}

}  // namespace vision::engine
