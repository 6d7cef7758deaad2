// The evaluator family: accumulates (prediction, ground truth) pairs and computes metrics.
// Distributed evaluation: every rank evaluates its share, the engine gathers each rank's
// SerializeState() on every rank and merges the others' states, so Compute() on any rank
// equals the single-process metric. Counts serialise as numbers; ranked metrics (AP) as
// their scored records.
#ifndef VISION_CORE_EVALUATOR_H_
#define VISION_CORE_EVALUATOR_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/plugin.h"
#include "core/sample.h"
#include "core/task_metadata.h"

namespace vision::core {

class Evaluator {
 public:
  static constexpr char kFamily[] = "evaluator";
  virtual ~Evaluator() = default;

  virtual void Reset() = 0;
  virtual absl::Status Add(const Sample& prediction, const Sample& ground_truth) = 0;
  // Metrics over everything added since Reset().
  virtual std::map<std::string, double> Compute() const = 0;
  // The metric that decides the best checkpoint ("hmean", "mask_AP", "mIoU").
  virtual std::string MainMetric() const = 0;
  // Everything added since Reset(), as bytes another rank's MergeState() accepts.
  virtual std::string SerializeState() const = 0;
  // Adds another rank's state to this one.
  virtual absl::Status MergeState(const std::string& state) = 0;

  // Result files in the format's own layout, for the format's official tools: writes
  // `prediction` (for the image `truth` describes) under `dir` (ICDAR2015's res_<image>.txt,
  // Cityscapes' labelIds PNGs), on the rank that predicted it.
  virtual absl::Status WriteResult(const Sample& prediction, const Sample& truth,
                                   const std::string& dir) const {
    return absl::OkStatus();
  }
  // Result files that need every rank's predictions (COCO's results JSON): called on rank 0
  // after the other ranks' states were merged.
  virtual absl::Status WriteMergedResults(const std::string& dir) const { return absl::OkStatus(); }

  // The evaluation dataset's metadata, given once when the pipeline is built and before any
  // Add: class names for per-class metrics, the format's own ids for result files.
  virtual absl::Status SetDatasetMetadata(const DatasetMetadata& metadata) {
    return absl::OkStatus();
  }

  // The annotations scored and their number of classes, checked against the evaluation
  // dataset when the pipeline is built; nullopt states nothing (test evaluators).
  virtual std::optional<TaskRequirements> DataRequirements() const { return std::nullopt; }
};

using EvaluatorRegistry = PluginRegistry<Evaluator>;

}  // namespace vision::core

#endif  // VISION_CORE_EVALUATOR_H_
