// Linear warmup in front of any LR schedule, and the linear scaling rule.
#ifndef VISION_CORE_LR_WARMUP_H_
#define VISION_CORE_LR_WARMUP_H_

#include <cstdint>
#include <memory>

#include "core/lr_schedule.h"

namespace vision::core {

// For step < warmup_steps the wrapped schedule's factor is multiplied by a ramp that rises
// linearly from start_factor (step 0) to 1 (step warmup_steps), as detectron2's
// WarmupParamScheduler does; afterwards the schedule is unchanged.
class WarmupSchedule : public LrSchedule {
 public:
  WarmupSchedule(std::unique_ptr<LrSchedule> inner, int64_t warmup_steps, double start_factor)
      : inner_(std::move(inner)), warmup_steps_(warmup_steps), start_factor_(start_factor) {}

  double Factor(int64_t step, int64_t total_steps) const override {
    const double base = inner_->Factor(step, total_steps);
    if (step >= warmup_steps_) return base;
    const double alpha = static_cast<double>(step) / static_cast<double>(warmup_steps_);
    return base * (start_factor_ + (1.0 - start_factor_) * alpha);
  }

 private:
  std::unique_ptr<LrSchedule> inner_;
  int64_t warmup_steps_;
  double start_factor_;
};

// The linear scaling rule (Goyal et al., 2017): lr * global_batch / reference_batch;
// reference_batch <= 0 leaves lr unchanged.
inline double ScaledLearningRate(double lr, int64_t global_batch, int64_t reference_batch) {
  if (reference_batch <= 0) return lr;
  return lr * static_cast<double>(global_batch) / static_cast<double>(reference_batch);
}

}  // namespace vision::core

#endif  // VISION_CORE_LR_WARMUP_H_
