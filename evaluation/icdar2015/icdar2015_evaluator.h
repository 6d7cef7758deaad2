// "ICDAR2015Hmean": the ICDAR2015 text-localisation metric, following the official RRC script
// for task 4.1 (script.py of the "IoU" evaluation, as DBNet and mmocr reimplement it):
//  0. Polygons that are not valid simple polygons as shapely judges them (a self-intersecting
//     bow-tie, zero area, a vertex touching another edge; core::IsValidSimplePolygon) are
//     dropped, ground truth and detections alike, before anything else. A dropped ground truth
//     is removed entirely: it is neither a care region (not in recall's denominator) nor a
//     don't-care region (it excludes no detection). This is what the reference evaluators do:
//     MhLiao/DB concern/icdar2015_eval/detection/iou.py and PaddleOCR's
//     ppocr/metrics/eval_det_iou.py skip `if not Polygon(points).is_valid or not
//     Polygon(points).is_simple` for both lists before building the don't-care list. Their
//     numbers are reported as "invalid_gt_dropped" and "invalid_det_dropped".
//  1. A detection whose intersection with one don't-care ground truth (ignore, "###") covers
//     more than area_precision_constraint of the detection's area is excluded.
//  2. Ground truths and detections are matched one-to-one greedily, in index order (ground
//     truth outer loop, detection inner loop): a pair matches when neither is matched yet,
//     neither is don't-care/excluded and their IoU > iou_threshold.
//  3. Over the whole set: recall = matched / care ground truths, precision = matched / care
//     detections (each 0 when its denominator is 0), hmean = 2PR / (P + R) (0 when P + R = 0).
// Areas and intersections are exact (Clipper, on coordinates rounded to 1/1024 px). Predictions
// (prediction.texts) and ground truth (ground_truth.texts) must be in the same coordinates,
// normally the original image's.
#ifndef VISION_EVALUATION_ICDAR2015_ICDAR2015_EVALUATOR_H_
#define VISION_EVALUATION_ICDAR2015_ICDAR2015_EVALUATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/evaluator.h"
#include "core/sample.h"
#include "evaluation/icdar2015/icdar2015_eval.pb.h"

namespace vision::evaluation::icdar2015 {

// Exact polygon geometry used by the metric, exposed for tests.
double PolygonArea(const core::Polygon& polygon);
double IntersectionArea(const core::Polygon& a, const core::Polygon& b);
double IoU(const core::Polygon& a, const core::Polygon& b);

class ICDAR2015HmeanEvaluator : public core::Evaluator {
 public:
  static absl::StatusOr<std::unique_ptr<ICDAR2015HmeanEvaluator>> Create(
      const ICDAR2015HmeanOptions& options);

  void Reset() override;
  absl::Status Add(const core::Sample& prediction, const core::Sample& ground_truth) override;
  // {"precision", "recall", "hmean", "invalid_gt_dropped", "invalid_det_dropped"} over
  // everything added (and merged) since Reset(); the last two are counts of polygons (rule 0).
  std::map<std::string, double> Compute() const override;
  std::string MainMetric() const override { return "hmean"; }
  // Text polygons, class-agnostic.
  std::optional<core::TaskRequirements> DataRequirements() const override {
    return core::TaskRequirements{core::AnnotationKind::kTextPolygons};
  }

  // Distributed evaluation (core/evaluator.h): the metric is a function of three sums, so the
  // state is those counts and the dropped ones, "ICDAR2015Hmean <matched> <care gt> <care det>
  // <dropped gt> <dropped det>", and merging adds.
  std::string SerializeState() const override;
  absl::Status MergeState(const std::string& state) override;

  // The counts {matched, care ground truths, care detections} since Reset().
  std::vector<double> State() const;
  // The invalid polygons dropped since Reset(): {ground truths, detections}.
  std::vector<double> InvalidDropped() const;

  // <dir>/res_<image stem>.txt, one detected text per line as x1,y1,...,xn,yn in integer
  // pixels: the result files the official RRC script evaluates.
  absl::Status WriteResult(const core::Sample& prediction, const core::Sample& truth,
                           const std::string& dir) const override;

 private:
  explicit ICDAR2015HmeanEvaluator(const ICDAR2015HmeanOptions& options) : options_(options) {}

  const ICDAR2015HmeanOptions options_;
  int64_t matched_ = 0;
  int64_t num_gt_care_ = 0;
  int64_t num_det_care_ = 0;
  int64_t num_gt_invalid_ = 0;
  int64_t num_det_invalid_ = 0;
};

}  // namespace vision::evaluation::icdar2015

#endif  // VISION_EVALUATION_ICDAR2015_ICDAR2015_EVALUATOR_H_
