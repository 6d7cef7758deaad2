#include "evaluation/icdar2015/icdar2015_evaluator.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/polygon.h"

namespace vision::evaluation::icdar2015 {
namespace {

constexpr char kStateTag[] = "ICDAR2015Hmean";

bool AllFinite(const core::Polygon& polygon) {
  for (const cv::Point2f& p : polygon) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y)) return false;
  }
  return true;
}

}  // namespace

// Only valid simple polygons reach the metric (rule 0), where the filled area is the area.
double PolygonArea(const core::Polygon& polygon) { return core::FilledPolygonArea(polygon); }

double IntersectionArea(const core::Polygon& a, const core::Polygon& b) {
  return core::IntersectionArea(a, b);
}

double IoU(const core::Polygon& a, const core::Polygon& b) {
  const double intersection = IntersectionArea(a, b);
  const double uni = PolygonArea(a) + PolygonArea(b) - intersection;
  return uni > 0 ? intersection / uni : 0;
}

absl::StatusOr<std::unique_ptr<ICDAR2015HmeanEvaluator>> ICDAR2015HmeanEvaluator::Create(
    const ICDAR2015HmeanOptions& options) {
  if (!(options.iou_threshold() >= 0 && options.iou_threshold() < 1) ||
      !(options.area_precision_constraint() >= 0 && options.area_precision_constraint() < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ICDAR2015HmeanOptions: iou_threshold and area_precision_constraint must be in [0, 1), "
        "got ",
        options.iou_threshold(), " and ", options.area_precision_constraint()));
  }
  return std::unique_ptr<ICDAR2015HmeanEvaluator>(new ICDAR2015HmeanEvaluator(options));
}

void ICDAR2015HmeanEvaluator::Reset() {
  matched_ = 0;
  num_gt_care_ = 0;
  num_det_care_ = 0;
  num_gt_invalid_ = 0;
  num_det_invalid_ = 0;
}

absl::Status ICDAR2015HmeanEvaluator::Add(const core::Sample& prediction,
                                          const core::Sample& ground_truth) {
  if (!prediction.id.empty() && !ground_truth.id.empty() && prediction.id != ground_truth.id) {
    return absl::InvalidArgumentError(absl::StrCat("prediction for '", prediction.id,
                                                   "' was paired with the ground truth of '",
                                                   ground_truth.id, "'; pair them by sample"));
  }
  for (const auto* texts : {&ground_truth.texts, &prediction.texts}) {
    for (size_t i = 0; i < texts->size(); ++i) {
      if (!AllFinite((*texts)[i].polygon)) {
        return absl::InvalidArgumentError(
            absl::StrCat("sample '", ground_truth.id,
                         "': ", texts == &ground_truth.texts ? "ground truth" : "detection",
                         " text ", i, " has a non-finite coordinate"));
      }
    }
  }

  // Rule 0: invalid polygons are dropped, as if they had not been given.
  std::vector<core::TextInstance> gts, dets;
  for (const core::TextInstance& text : ground_truth.texts) {
    if (core::IsValidSimplePolygon(text.polygon)) gts.push_back(text);
  }
  for (const core::TextInstance& text : prediction.texts) {
    if (core::IsValidSimplePolygon(text.polygon)) dets.push_back(text);
  }

  // Rule 1: detections mostly inside one don't-care region are excluded.
  std::vector<bool> det_excluded(dets.size(), false);
  for (size_t d = 0; d < dets.size(); ++d) {
    const double det_area = PolygonArea(dets[d].polygon);
    for (const core::TextInstance& gt : gts) {
      if (!gt.ignore) continue;
      const double covered =
          det_area > 0 ? IntersectionArea(gt.polygon, dets[d].polygon) / det_area : 0;
      if (covered > options_.area_precision_constraint()) {
        det_excluded[d] = true;
        break;
      }
    }
  }

  // Rule 2: greedy one-to-one matching in index order.
  std::vector<bool> det_matched(dets.size(), false);
  int64_t matched = 0;
  for (const core::TextInstance& gt : gts) {
    if (gt.ignore) continue;
    for (size_t d = 0; d < dets.size(); ++d) {
      if (det_matched[d] || det_excluded[d]) continue;
      if (IoU(gt.polygon, dets[d].polygon) > options_.iou_threshold()) {
        det_matched[d] = true;
        ++matched;
        break;
      }
    }
  }

  int64_t gt_care = 0;
  for (const core::TextInstance& gt : gts) gt_care += gt.ignore ? 0 : 1;
  int64_t det_care = 0;
  for (bool excluded : det_excluded) det_care += excluded ? 0 : 1;
  matched_ += matched;
  num_gt_care_ += gt_care;
  num_det_care_ += det_care;
  num_gt_invalid_ += static_cast<int64_t>(ground_truth.texts.size() - gts.size());
  num_det_invalid_ += static_cast<int64_t>(prediction.texts.size() - dets.size());
  return absl::OkStatus();
}

std::map<std::string, double> ICDAR2015HmeanEvaluator::Compute() const {
  const double recall =
      num_gt_care_ == 0 ? 0 : static_cast<double>(matched_) / static_cast<double>(num_gt_care_);
  const double precision =
      num_det_care_ == 0 ? 0 : static_cast<double>(matched_) / static_cast<double>(num_det_care_);
  const double hmean = precision + recall == 0 ? 0 : 2 * precision * recall / (precision + recall);
  return {{"precision", precision},
          {"recall", recall},
          {"hmean", hmean},
          {"invalid_gt_dropped", static_cast<double>(num_gt_invalid_)},
          {"invalid_det_dropped", static_cast<double>(num_det_invalid_)}};
}

std::vector<double> ICDAR2015HmeanEvaluator::State() const {
  return {static_cast<double>(matched_), static_cast<double>(num_gt_care_),
          static_cast<double>(num_det_care_)};
}

std::vector<double> ICDAR2015HmeanEvaluator::InvalidDropped() const {
  return {static_cast<double>(num_gt_invalid_), static_cast<double>(num_det_invalid_)};
}

std::string ICDAR2015HmeanEvaluator::SerializeState() const {
  return absl::StrCat(kStateTag, " ", matched_, " ", num_gt_care_, " ", num_det_care_, " ",
                      num_gt_invalid_, " ", num_det_invalid_);
}

absl::Status ICDAR2015HmeanEvaluator::MergeState(const std::string& state) {
  const std::vector<std::string> fields = absl::StrSplit(state, ' ');
  constexpr int kCounts = 5;
  int64_t counts[kCounts];
  bool ok = fields.size() == kCounts + 1 && fields[0] == kStateTag;
  for (int i = 0; ok && i < kCounts; ++i) {
    ok = absl::SimpleAtoi(fields[i + 1], &counts[i]) && counts[i] >= 0;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ICDAR2015Hmean MergeState: expected another ICDAR2015Hmean evaluator's SerializeState() "
        "('",
        kStateTag, " <matched> <care gt> <care det> <dropped gt> <dropped det>'), got '",
        state.substr(0, 80), "'"));
  }
  matched_ += counts[0];
  num_gt_care_ += counts[1];
  num_det_care_ += counts[2];
  num_gt_invalid_ += counts[3];
  num_det_invalid_ += counts[4];
  return absl::OkStatus();
}

VISION_REGISTER_PLUGIN(core::EvaluatorRegistry, "ICDAR2015Hmean", ICDAR2015HmeanEvaluator,
                       ICDAR2015HmeanOptions);

absl::Status ICDAR2015HmeanEvaluator::WriteResult(const core::Sample& prediction,
                                                  const core::Sample& truth,
                                                  const std::string& dir) const {
  const std::string stem = std::filesystem::path(truth.image_path).stem().string();
  const std::string path =
      (std::filesystem::path(dir) / absl::StrCat("res_", stem, ".txt")).string();
  std::ofstream out(path);
  for (const core::TextInstance& t : prediction.texts) {
    std::vector<std::string> coords;
    for (const cv::Point2f& p : t.polygon) {
      coords.push_back(absl::StrCat(cvRound(p.x)));
      coords.push_back(absl::StrCat(cvRound(p.y)));
    }
    out << absl::StrJoin(coords, ",") << "\n";
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace vision::evaluation::icdar2015
