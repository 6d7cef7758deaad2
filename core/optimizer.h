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
