// Dynamic loss scaling for float16 training (as torch.cuda.amp.GradScaler): the loss is
// multiplied by a scale before backward; gradients are unscaled before clipping; a step
// whose gradients are not finite is skipped and the scale backs off; after growth_interval
// finite steps in a row the scale grows. Disabled, it only checks finiteness (bfloat16 and
// float32 runs still skip and count non-finite steps).
#ifndef VISION_ENGINE_LOSS_SCALER_H_
#define VISION_ENGINE_LOSS_SCALER_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace vision::engine {

struct LossScalerOptions {
  bool enabled = false;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options);

  at::Tensor Scale(const at::Tensor& loss) const;

  // Divides every defined gradient by the scale (when enabled) and returns true when all of
  // them are finite. In data-parallel runs, call after gradients were averaged, so every rank
  // sees the same answer.
  bool UnscaleAndCheckFinite(const std::vector<at::Tensor>& params) const;

  // Records the outcome of a step: backs off on non-finite gradients, grows after
  // growth_interval finite steps in a row.
  void Update(bool finite);

  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  bool enabled() const { return options_.enabled; }

  // Checkpoint state: {scale, growth_tracker, skipped_steps}.
  std::vector<double> State() const;
  void LoadState(const std::vector<double>& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace vision::engine

#endif  // VISION_ENGINE_LOSS_SCALER_H_
