// The evaluator family: accumulates (prediction, ground truth) pairs and computes metrics.
// For distributed evaluation an evaluator's state is a flat vector of doubles that ranks sum,
// or, where sums do not suffice (ranked AP), serialised records that ranks gather.
#ifndef VISION_CORE_EVALUATOR_H_
#define VISION_CORE_EVALUATOR_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "core/plugin.h"
#include "core/sample.h"

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
};

using EvaluatorRegistry = PluginRegistry<Evaluator>;

}  // namespace vision::core

#endif  // VISION_CORE_EVALUATOR_H_
