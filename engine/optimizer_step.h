// The optimizer phase of a training step, as the trainer runs it (and the models' step
// benchmarks, so that they time the trainer's code): unscale and check the gradients, clip them,
// and step, or skip the step when they are not all finite.
//
// Where the optimizer can skip on the device (core::Optimizer::SkipsOnDevice: SGD stepped by
// the FUSED implementation, the default on CUDA), the check, the loss scale's update, clipping
// and the skip all stay on the device, and the host never waits for them: a CUDA step then has
// no host-device synchronisation of its own. Otherwise the host reads the check's answer and
// steps or not, as PyTorch's GradScaler.step does.
#ifndef VISION_ENGINE_OPTIMIZER_STEP_H_
#define VISION_ENGINE_OPTIMIZER_STEP_H_

#include <vector>

#include <ATen/core/Tensor.h>

#include "core/optimizer.h"
#include "engine/loss_scaler.h"

namespace vision::engine {

struct OptimizerPhaseOptions {
  // Clip the gradients to this global L2 norm; 0 disables.
  double clip_grad_norm = 0;
  // Compute the gradients' norm also without clipping (for the logs).
  bool want_grad_norm = false;
};

struct OptimizerPhaseResult {
  // 0-dim float32: 1 when some gradient was not finite and the step was skipped, else 0. On the
  // gradients' device where the optimizer skipped there; on the host (read already) otherwise.
  at::Tensor skipped;
  // Whether the optimizer skipped on the device (core::Optimizer::SkipsOnDevice), so that the
  // host has not read `skipped`.
  bool decided_on_device = false;
  // 0-dim: the gradients' global L2 norm before clipping, on their device, where clipping or
  // asked for; undefined after a step skipped on the host.
  at::Tensor grad_norm;
};

// Runs the phase over `params` (the gradients of every rank already averaged, so that every rank
// decides alike). Leaves the gradients unscaled and clipped; zeroing them is the caller's.
OptimizerPhaseResult RunOptimizerPhase(const std::vector<at::Tensor>& params, LossScaler& scaler,
                                       core::Optimizer& optimizer,
                                       const OptimizerPhaseOptions& options);

// The global L2 norm of the defined gradients, summed in float64 (0-dim float64 on their device;
// 0 without any), without reading it on the host: what the logs show when nothing is clipped.
at::Tensor GradNorm(const std::vector<at::Tensor>& params);

// torch::nn::utils::clip_grad_norm_ (L2), the same arithmetic, but returning the norm before
// clipping as a tensor instead of reading it on the host: nothing waits for the device.
at::Tensor ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace vision::engine

#endif  // VISION_ENGINE_OPTIMIZER_STEP_H_
