// SGD, Adam and AdamW: LibTorch's optimizers over core's parameter groups.
#include <memory>
#include <vector>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/optimizer.h"
#include "core/status_macros.h"
#include "engine/optim/optim.pb.h"

namespace vision::engine::optim {
namespace {

using core::ParamGroupSpec;

// Owns a LibTorch optimizer built from one options object per group.
template <typename TorchOptimizer>
class TorchOptimizerPlugin : public core::Optimizer {
 public:
  template <typename MakeOptions>
  TorchOptimizerPlugin(const std::vector<ParamGroupSpec>& groups, MakeOptions make_options) {
    std::vector<torch::optim::OptimizerParamGroup> torch_groups;
    for (const ParamGroupSpec& group : groups) {
      torch_groups.emplace_back(group.params, make_options(group));
      base_lrs_.push_back(group.lr);
    }
    // Every group carries its own options, so the defaults below are never used.
    optimizer_ = std::make_unique<TorchOptimizer>(std::move(torch_groups),
                                                  *make_options(groups.front()));
  }

  torch::optim::Optimizer& torch_optimizer() override { return *optimizer_; }

 private:
  std::unique_ptr<TorchOptimizer> optimizer_;
};

absl::Status CheckGroups(const std::vector<ParamGroupSpec>& groups) {
  if (groups.empty()) {
    return absl::InvalidArgumentError("optimizer: the model has no trainable parameters");
  }
  return absl::OkStatus();
}

absl::Status CheckAdam(const AdamOptions& o) {
  if (o.beta1() < 0 || o.beta1() >= 1 || o.beta2() < 0 || o.beta2() >= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.options.beta1/beta2: must be in [0, 1), got ", o.beta1(), ", ", o.beta2()));
  }
  if (o.eps() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.options.eps: must be > 0, got ", o.eps()));
  }
  return absl::OkStatus();
}

class Sgd : public TorchOptimizerPlugin<torch::optim::SGD> {
 public:
  using TorchOptimizerPlugin::TorchOptimizerPlugin;

  static absl::StatusOr<std::unique_ptr<Sgd>> Create(const SgdOptions& o,
                                                     const std::vector<ParamGroupSpec>& groups) {
    VISION_RETURN_IF_ERROR(CheckGroups(groups));
    if (o.momentum() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.options.momentum: must be >= 0, got ", o.momentum()));
    }
    if (o.nesterov() && (o.momentum() <= 0 || o.dampening() != 0)) {
      return absl::InvalidArgumentError(
          "optimizer.options.nesterov: needs momentum > 0 and dampening 0");
    }
    return std::make_unique<Sgd>(groups, [o](const ParamGroupSpec& g) {
      return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(g.lr)
                                                            .momentum(o.momentum())
                                                            .dampening(o.dampening())
                                                            .nesterov(o.nesterov())
                                                            .weight_decay(g.weight_decay));
    });
  }
};

class Adam : public TorchOptimizerPlugin<torch::optim::Adam> {
 public:
  using TorchOptimizerPlugin::TorchOptimizerPlugin;

  static absl::StatusOr<std::unique_ptr<Adam>> Create(const AdamOptions& o,
                                                      const std::vector<ParamGroupSpec>& groups) {
    VISION_RETURN_IF_ERROR(CheckGroups(groups));
    VISION_RETURN_IF_ERROR(CheckAdam(o));
    return std::make_unique<Adam>(groups, [o](const ParamGroupSpec& g) {
      return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(g.lr)
                                                             .betas({o.beta1(), o.beta2()})
                                                             .eps(o.eps())
                                                             .amsgrad(o.amsgrad())
                                                             .weight_decay(g.weight_decay));
    });
  }
};

class AdamW : public TorchOptimizerPlugin<torch::optim::AdamW> {
 public:
  using TorchOptimizerPlugin::TorchOptimizerPlugin;

  static absl::StatusOr<std::unique_ptr<AdamW>> Create(const AdamOptions& o,
                                                       const std::vector<ParamGroupSpec>& groups) {
    VISION_RETURN_IF_ERROR(CheckGroups(groups));
    VISION_RETURN_IF_ERROR(CheckAdam(o));
    return std::make_unique<AdamW>(groups, [o](const ParamGroupSpec& g) {
      return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(g.lr)
                                                              .betas({o.beta1(), o.beta2()})
                                                              .eps(o.eps())
                                                              .amsgrad(o.amsgrad())
                                                              .weight_decay(g.weight_decay));
    });
  }
};

VISION_REGISTER_PLUGIN(core::OptimizerRegistry, "SGD", Sgd, SgdOptions);
VISION_REGISTER_PLUGIN(core::OptimizerRegistry, "Adam", Adam, AdamOptions);
VISION_REGISTER_PLUGIN(core::OptimizerRegistry, "AdamW", AdamW, AdamOptions);

}  // namespace
}  // namespace vision::engine::optim
