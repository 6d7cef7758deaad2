// The optimizer family: builds a LibTorch optimizer over parameter groups made by core from
// the config (weight-decay exclusions, backbone learning-rate multiplier).
#ifndef VISION_CORE_OPTIMIZER_H_
#define VISION_CORE_OPTIMIZER_H_

#include <memory>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>
#include <torch/optim/optimizer.h>

#include "core/config/pipeline.pb.h"
#include "core/plugin.h"

namespace vision::core {

// One parameter group as core sees it; the plugin maps it onto its own options type.
struct ParamGroupSpec {
  std::string name;  // "decay", "no_decay", "backbone_decay", ...
  std::vector<at::Tensor> params;
  double lr = 0;
  double weight_decay = 0;
};

// What core gives every optimizer besides its own options.
struct OptimizerSpec {
  std::vector<ParamGroupSpec> groups;
  OptimizerConfig::Implementation implementation = OptimizerConfig::AUTO;
  // Where the parameters are trained. The trainer moves the model there after the optimizer is
  // built, so checks made at construction go by this, not by the parameters' device then.
  c10::DeviceType device_type = c10::kCPU;
};

class Optimizer {
 public:
  static constexpr char kFamily[] = "optimizer";
  virtual ~Optimizer() = default;

  virtual torch::optim::Optimizer& torch_optimizer() = 0;

  // Whether StepUnless can skip a step on the device, so that the host never waits for the
  // gradients' finiteness check (SGD stepped by the FUSED implementation, the default on CUDA).
  virtual bool SkipsOnDevice() const { return false; }
  // torch_optimizer().step(), except that nothing changes where `skip` (a 0-dim float32 tensor
  // on the parameters' device) holds 1. Throws c10::Error unless SkipsOnDevice().
  virtual void StepUnless(const at::Tensor& skip);

  // Sets every group's rate to factor * its base rate (the group's lr at construction).
  void SetLrFactor(double factor);
  // The current rate of group `index`.
  double lr(size_t index);

 protected:
  std::vector<double> base_lrs_;
};

using OptimizerRegistry = PluginRegistry<Optimizer, const OptimizerSpec&>;

}  // namespace vision::core

#endif  // VISION_CORE_OPTIMIZER_H_
