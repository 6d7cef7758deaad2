// The CommStrategy plugins: "allreduce" (flat, after backward), "bucketed" (DDP-style
// overlapped buckets), "fp16_compress" and "bf16_compress" (bucketed, half-width on the wire).
#ifndef VISION_DISTRIBUTED_STRATEGIES_STRATEGIES_H_
#define VISION_DISTRIBUTED_STRATEGIES_STRATEGIES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm_strategy.h"
#include "distributed/strategies/gradient_reducer.h"
#include "distributed/strategies/strategies.pb.h"

namespace vision::distributed::strategies {

// Shared by every strategy; they differ only in their ReducerOptions.
class ReducerStrategy : public core::CommStrategy {
 public:
  explicit ReducerStrategy(ReducerOptions options) : reducer_(options) {}

  absl::Status Attach(const std::vector<at::Tensor>& params, const std::vector<std::string>& names,
                      c10::intrusive_ptr<c10d::ProcessGroup> group) override {
    return reducer_.Attach(params, names, std::move(group));
  }
  void PrepareBackward(bool sync) override { reducer_.PrepareBackward(sync); }
  absl::Status FinishBackward() override { return reducer_.FinishBackward(); }

  std::vector<std::vector<int>> BucketLayout() const { return reducer_.BucketLayout(); }

 private:
  GradientReducer reducer_;
};

class AllReduceStrategy : public ReducerStrategy {
 public:
  using ReducerStrategy::ReducerStrategy;
  static absl::StatusOr<std::unique_ptr<AllReduceStrategy>> Create(const AllReduceOptions& options);
};

class BucketedStrategy : public ReducerStrategy {
 public:
  using ReducerStrategy::ReducerStrategy;
  static absl::StatusOr<std::unique_ptr<BucketedStrategy>> Create(const BucketedOptions& options);
};

class Fp16CompressStrategy : public ReducerStrategy {
 public:
  using ReducerStrategy::ReducerStrategy;
  static absl::StatusOr<std::unique_ptr<Fp16CompressStrategy>> Create(
      const BucketedOptions& options);
};

class Bf16CompressStrategy : public ReducerStrategy {
 public:
  using ReducerStrategy::ReducerStrategy;
  static absl::StatusOr<std::unique_ptr<Bf16CompressStrategy>> Create(
      const BucketedOptions& options);
};

}  // namespace vision::distributed::strategies

#endif  // VISION_DISTRIBUTED_STRATEGIES_STRATEGIES_H_
