#include "core/instance_targets.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"
#include "core/run_length_mask.h"
#include "core/status_macros.h"
#include "core/status_util.h"

namespace vision::core {
namespace {

// Sub-pixel vertices for cv::fillPoly: 8 fractional bits.
constexpr int kShift = 8;

void FillPolygons(const std::vector<Polygon>& polygons, cv::Mat* mask) {
  std::vector<std::vector<cv::Point>> fixed;
  for (const Polygon& polygon : polygons) {
    std::vector<cv::Point>& points = fixed.emplace_back();
    for (const cv::Point2f& p : polygon) {
      points.emplace_back(static_cast<int>(std::lround(p.x * (1 << kShift))),
                          static_cast<int>(std::lround(p.y * (1 << kShift))));
    }
  }
  cv::fillPoly(*mask, fixed, cv::Scalar(1), cv::LINE_8, kShift);
}

}  // namespace

absl::StatusOr<std::map<std::string, at::Tensor>> MakeInstanceTargets(
    const Sample& sample, const InstanceTargetOptions& options) {
  std::vector<const ObjectInstance*> kept;
  for (const ObjectInstance& object : sample.objects) {
    if (!object.is_crowd || options.crowd) kept.push_back(&object);
  }
  const int64_t k = static_cast<int64_t>(kept.size());
  const int height = sample.image.rows;
  const int width = sample.image.cols;
  at::Tensor boxes = at::empty({k, 4}, at::kFloat);
  at::Tensor labels = at::empty({k}, at::kLong);
  at::Tensor is_crowd = at::empty({k}, at::kByte);
  at::Tensor masks;
  if (options.masks) masks = at::zeros({k, height, width}, at::kByte);
  auto* box = boxes.data_ptr<float>();
  for (int64_t i = 0; i < k; ++i) {
    const ObjectInstance& object = *kept[i];
    box[4 * i + 0] = object.box.x;
    box[4 * i + 1] = object.box.y;
    box[4 * i + 2] = object.box.x + object.box.width;
    box[4 * i + 3] = object.box.y + object.box.height;
    labels.data_ptr<int64_t>()[i] = object.label;
    is_crowd.data_ptr<uint8_t>()[i] = object.is_crowd ? 1 : 0;
    if (!options.masks) continue;
    cv::Mat mask(height, width, CV_8U, masks[i].data_ptr<uint8_t>());
    if (object.rle.height > 0) {
      if (object.rle.height != height || object.rle.width != width) {
        return absl::InvalidArgumentError(absl::StrCat(
            "annotation ", object.annotation_id, ": RLE mask is ", object.rle.width, "x",
            object.rle.height, " but the image is ", width, "x", height,
            "; an augmentation did not transform it"));
      }
      VISION_ASSIGN_OR_RETURN(
          const cv::Mat decoded,
          WithContext(absl::StrCat("annotation ", object.annotation_id), DecodeRle(object.rle)));
      decoded.copyTo(mask);
    } else {
      FillPolygons(object.polygons, &mask);
    }
  }
  std::map<std::string, at::Tensor> targets = {
      {"boxes", boxes}, {"labels", labels}, {"is_crowd", is_crowd}};
  if (options.masks) targets["masks"] = masks;
  return targets;
}

absl::Status InstanceTargetGenerator::GenerateInstances(
    const Sample& sample, std::map<std::string, at::Tensor>* instances) const {
  VISION_ASSIGN_OR_RETURN(*instances, MakeInstanceTargets(sample, options_));
  return absl::OkStatus();
}

}  // namespace vision::core
