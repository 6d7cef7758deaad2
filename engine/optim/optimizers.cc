// SGD, Adam and AdamW: LibTorch's optimizers over core's parameter groups, stepped by the
// configured implementation (engine/optim/multi_tensor.h).
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/optimizer.h"
#include "core/status_macros.h"
#include "engine/optim/multi_tensor.h"
#include "engine/optim/optim.pb.h"

namespace vision::engine::optim {
namespace {

using core::ParamGroupSpec;

Implementation FromConfig(core::OptimizerConfig::Implementation implementation) {
  switch (implementation) {
    case core::OptimizerConfig::FOR_LOOP:
      return Implementation::kForLoop;
    case core::OptimizerConfig::FOREACH:
      return Implementation::kForeach;
    case core::OptimizerConfig::FUSED:
      return Implementation::kFused;
    case core::OptimizerConfig::AUTO:
      break;
  }
  return Implementation::kAuto;
}

// Owns a LibTorch optimizer built from one options object per group.
template <typename TorchOptimizer>
class TorchOptimizerPlugin : public core::Optimizer {
 public:
  template <typename MakeOptions>
  TorchOptimizerPlugin(const core::OptimizerSpec& spec, MakeOptions make_options) {
    std::vector<torch::optim::OptimizerParamGroup> torch_groups;
    for (const ParamGroupSpec& group : spec.groups) {
      torch_groups.emplace_back(group.params, make_options(group));
      base_lrs_.push_back(group.lr);
    }
    // Every group carries its own options, so the defaults below are never used.
    optimizer_ = std::make_unique<TorchOptimizer>(
        std::move(torch_groups), *make_options(spec.groups.front()),
        FromConfig(spec.implementation));
  }

  torch::optim::Optimizer& torch_optimizer() override { return *optimizer_; }

 protected:
  TorchOptimizer& typed_optimizer() const { return *optimizer_; }

 private:
  std::unique_ptr<TorchOptimizer> optimizer_;
};

// Refuses an implementation that would fail or be wrong where the parameters will be trained.
absl::Status CheckSpec(const core::OptimizerSpec& spec, Algorithm algorithm) {
  if (spec.groups.empty()) {
    return absl::InvalidArgumentError("optimizer: the model has no trainable parameters");
  }
  for (const ParamGroupSpec& group : spec.groups) {
    for (size_t i = 0; i < group.params.size(); ++i) {
      const std::string reason = UnsupportedReason(algorithm, FromConfig(spec.implementation),
                                                   spec.device_type, group.params[i].scalar_type());
      if (!reason.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer.implementation: ", reason, " (parameter ", i, " of group '", group.name,
            "' is ", c10::toString(group.params[i].scalar_type()), ", trained on ",
            c10::DeviceTypeName(spec.device_type, /*lower_case=*/true), ")"));
      }
    }
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

class Sgd : public TorchOptimizerPlugin<MultiTensorSGD> {
 public:
  using TorchOptimizerPlugin::TorchOptimizerPlugin;

  bool SkipsOnDevice() const override { return typed_optimizer().SkipsOnDevice(); }
  void StepUnless(const at::Tensor& skip) override { typed_optimizer().StepUnless(skip); }

  static absl::StatusOr<std::unique_ptr<Sgd>> Create(const SgdOptions& o,
                                                     const core::OptimizerSpec& spec) {
    VISION_RETURN_IF_ERROR(CheckSpec(spec, Algorithm::kSgd));
    if (o.momentum() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.options.momentum: must be >= 0, got ", o.momentum()));
    }
    if (o.nesterov() && (o.momentum() <= 0 || o.dampening() != 0)) {
      return absl::InvalidArgumentError(
          "optimizer.options.nesterov: needs momentum > 0 and dampening 0");
    }
    return std::make_unique<Sgd>(spec, [o](const ParamGroupSpec& g) {
      return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(g.lr)
                                                            .momentum(o.momentum())
                                                            .dampening(o.dampening())
                                                            .nesterov(o.nesterov())
                                                            .weight_decay(g.weight_decay));
    });
  }
};

class Adam : public TorchOptimizerPlugin<MultiTensorAdam> {
 public:
  using TorchOptimizerPlugin::TorchOptimizerPlugin;

  static absl::StatusOr<std::unique_ptr<Adam>> Create(const AdamOptions& o,
                                                      const core::OptimizerSpec& spec) {
    VISION_RETURN_IF_ERROR(CheckSpec(spec, Algorithm::kAdam));
    VISION_RETURN_IF_ERROR(CheckAdam(o));
    return std::make_unique<Adam>(spec, [o](const ParamGroupSpec& g) {
      return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(g.lr)
                                                             .betas({o.beta1(), o.beta2()})
                                                             .eps(o.eps())
                                                             .amsgrad(o.amsgrad())
                                                             .weight_decay(g.weight_decay));
    });
  }
};

class AdamW : public TorchOptimizerPlugin<MultiTensorAdamW> {
 public:
  using TorchOptimizerPlugin::TorchOptimizerPlugin;

  static absl::StatusOr<std::unique_ptr<AdamW>> Create(const AdamOptions& o,
                                                       const core::OptimizerSpec& spec) {
    VISION_RETURN_IF_ERROR(CheckSpec(spec, Algorithm::kAdamW));
    VISION_RETURN_IF_ERROR(CheckAdam(o));
    return std::make_unique<AdamW>(spec, [o](const ParamGroupSpec& g) {
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
