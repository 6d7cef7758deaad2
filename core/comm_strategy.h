// The gradient-communication family: how gradients are averaged across data-parallel ranks
// (one flat all-reduce, overlapped buckets, compressed buckets, ...).
#ifndef VISION_CORE_COMM_STRATEGY_H_
#define VISION_CORE_COMM_STRATEGY_H_

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include "absl/status/status.h"
#include "core/plugin.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace vision::core {

class CommStrategy {
 public:
  static constexpr char kFamily[] = "comm_strategy";
  virtual ~CommStrategy() = default;

  // Called once, after parameters were broadcast from rank 0. May register autograd hooks.
  // `names` (one per parameter, or empty) make error messages name parameters.
  virtual absl::Status Attach(const std::vector<at::Tensor>& params,
                              const std::vector<std::string>& names,
                              c10::intrusive_ptr<c10d::ProcessGroup> group) = 0;
  // Before each backward; `sync` is false on accumulation micro-steps (no communication).
  virtual void PrepareBackward(bool sync) = 0;
  // After backward on a sync step: waits until every gradient holds the average over ranks.
  virtual absl::Status FinishBackward() = 0;
};

using CommStrategyRegistry = PluginRegistry<CommStrategy>;

}  // namespace vision::core

#endif  // VISION_CORE_COMM_STRATEGY_H_
