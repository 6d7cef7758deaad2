// Dynamic loss scaling for float16 training (as torch.cuda.amp.GradScaler): the loss is
// multiplied by a scale before backward; gradients are unscaled before clipping; a step
// whose gradients are not finite is skipped and the scale backs off; after growth_interval
// finite steps in a row the scale grows, unless that would take it past float32's range. Disabled,
// it only checks finiteness (bfloat16 and float32 runs still skip and count non-finite steps).
#ifndef VISION_ENGINE_LOSS_SCALER_H_
#define VISION_ENGINE_LOSS_SCALER_H_

#include <cstdint>
#include <optional>
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
  // sees the same answer. Reading the answer is a host-device synchronisation.
  bool UnscaleAndCheckFinite(const std::vector<at::Tensor>& params);

  // Records the outcome of a step: backs off on non-finite gradients, grows after
  // growth_interval finite steps in a row.
  void Update(bool finite);

  // UnscaleAndCheckFinite and Update in one, kept on the gradients' device (which must be one):
  // returns a 0-dim float32 tensor there that holds 1 when some gradient is not finite, and
  // updates the scale, growth tracker and skip count there too (ATen's
  // _amp_update_scale_, as PyTorch's GradScaler), so the host never waits for the check. For
  // optimizers that skip a step on the device (core::Optimizer::StepUnless). From then on,
  // scale(), growth_tracker(), skipped_steps() and State() read the device's values (each a
  // synchronisation); UnscaleAndCheckFinite and Update bring them back to the host first.
  at::Tensor UnscaleAndRecord(const std::vector<at::Tensor>& params);

  double scale() const;
  int64_t growth_tracker() const;
  int64_t skipped_steps() const;
  bool enabled() const { return options_.enabled; }

  // Checkpoint state: {scale, growth_tracker, skipped_steps}.
  std::vector<double> State() const;
  void LoadState(const std::vector<double>& state);

 private:
  // Where UnscaleAndRecord keeps the state: 0-dim tensors on the gradients' device.
  struct DeviceState {
    at::Tensor scale;           // float32
    at::Tensor growth_tracker;  // int32
    at::Tensor skipped_steps;   // int64
  };
  void MoveStateToHost();

  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  std::optional<DeviceState> device_;
};

}  // namespace vision::engine

#endif  // VISION_ENGINE_LOSS_SCALER_H_
