// "SemanticSegmentation": per-class IoU and mIoU of label maps, as cityscapesScripts'
// evalPixelLevelSemanticLabeling computes them, plus pixel and mean class accuracy.
//
// Predictions and ground truth are Sample::semantic, HxW 8-bit labels 0..K-1 of the evaluation
// dataset's K classes, 255 = ignore, both at the original image's size. Every ground-truth pixel
// that is not 255 adds one to a K x (K+1) confusion matrix M[truth][predicted], where the last
// column counts pixels the prediction leaves at 255 ("no class"). Ground-truth 255 pixels count
// nowhere. From the matrix:
//   IoU_c = TP / (TP + FP + FN): TP = M[c][c], FN = row c's sum - TP (pixels predicted as no
//     class are misses, as cityscapesScripts counts a predicted ignored label id), FP = column
//     c's sum - TP.
//   mIoU = the mean of IoU_c over the classes with TP + FP + FN > 0: a class neither in the
//     ground truth nor predicted on a scored pixel is left out, exactly as cityscapesScripts
//     leaves out its NaN scores; such a class has no "IoU/<name>" entry either.
//   aAcc = sum of TP / scored pixels; mAcc = the mean of TP / row sum over classes present in
//     the ground truth.
//   Where the dataset's metadata groups classes into categories (Cityscapes' flat, construction,
//   ..., vehicle), each category is scored as one class: TP = pixels of the category's classes
//   predicted as any of them, FN = the rest of their rows, FP = pixels of other classes predicted
//   as one of them; "category_mIoU" averages the categories with a non-zero denominator.
// Each average is 0 when nothing was scored, so a main metric is always a number.
#ifndef VISION_EVALUATION_SEMANTIC_SEGMENTATION_SEMANTIC_SEGMENTATION_EVALUATOR_H_
#define VISION_EVALUATION_SEMANTIC_SEGMENTATION_SEMANTIC_SEGMENTATION_EVALUATOR_H_

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
#include "core/task_metadata.h"
#include "evaluation/semantic_segmentation/semantic_segmentation_eval.pb.h"

namespace vision::evaluation::semantic_segmentation {

class SemanticSegmentationEvaluator : public core::Evaluator {
 public:
  static absl::StatusOr<std::unique_ptr<SemanticSegmentationEvaluator>> Create(
      const SemanticSegmentationOptions& options);

  void Reset() override;
  absl::Status Add(const core::Sample& prediction, const core::Sample& ground_truth) override;
  // "IoU/<class>", "mIoU", "aAcc", "mAcc", and with categories "category_IoU/<category>" and
  // "category_mIoU" (see the top of this file).
  std::map<std::string, double> Compute() const override;
  std::string MainMetric() const override { return "mIoU"; }
  // Label maps; the class count only when the options state one.
  std::optional<core::TaskRequirements> DataRequirements() const override;
  // Takes the classes (names, categories, format ids, colours) to score and write; resets the
  // matrix to that many classes.
  absl::Status SetDatasetMetadata(const core::DatasetMetadata& metadata) override;

  // Distributed evaluation (core/evaluator.h): "SemanticSegmentation <K> <K*(K+1) counts>", and
  // merging adds the matrices.
  std::string SerializeState() const override;
  absl::Status MergeState(const std::string& state) override;

  // Writes the prediction in the format's ids (DatasetMetadata::source_ids; no-class pixels as
  // unlabeled_result_id) as <dir>/labelIds/<folder>/<image stem>.png, and coloured with the
  // format's palette as <dir>/color/<folder>/<image stem>.png, where <folder> is the name of the
  // directory holding truth.image_path. For Cityscapes this is the layout cityscapesScripts'
  // evalPixelLevelSemanticLabeling finds (CITYSCAPES_RESULTS=<dir>/labelIds): it searches that
  // tree for exactly one <city>_<seq>_<frame>*.png per ground truth, so the colour drawings and
  // the eval tool's own drawings (<dir>/<stem>.png) must stay outside it. Without format ids
  // (a dataset without them, or no metadata: tools/infer on a folder of images) the labels are
  // written as they are, under <dir>/trainIds/ instead.
  absl::Status WriteResult(const core::Sample& prediction, const core::Sample& truth,
                           const std::string& dir) const override;

  int num_classes() const { return num_classes_; }
  // M[truth][predicted], row-major, K rows of K+1 columns (the last: predicted as no class).
  const std::vector<int64_t>& confusion_matrix() const { return matrix_; }

 private:
  explicit SemanticSegmentationEvaluator(const SemanticSegmentationOptions& options);

  // Checks one label map's values: 0..K-1 or 255; the message names the map's role.
  absl::Status CheckLabels(const cv::Mat& labels, const std::string& sample,
                           bool is_prediction) const;
  std::string ClassName(int label) const;

  const SemanticSegmentationOptions options_;
  int num_classes_ = 0;
  core::DatasetMetadata metadata_;
  std::vector<int64_t> matrix_;
};

}  // namespace vision::evaluation::semantic_segmentation

#endif  // VISION_EVALUATION_SEMANTIC_SEGMENTATION_SEMANTIC_SEGMENTATION_EVALUATOR_H_
