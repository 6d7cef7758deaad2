#include "models/dbnet/db_head.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include "core/batch_norm.h"

namespace vision::models::dbnet {
namespace {

torch::nn::Sequential MakeBranch(int64_t in_channels) {
  const int64_t hidden = in_channels / 4;
  return torch::nn::Sequential(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, hidden, 3).padding(1).bias(false)),
      core::BatchNorm2d(hidden), torch::nn::ReLU(),
      torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(hidden, hidden, 2).stride(2)),
      core::BatchNorm2d(hidden), torch::nn::ReLU(),
      torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(hidden, 1, 2).stride(2)),
      torch::nn::Sigmoid());
}

}  // namespace

void InitializeDBWeights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  // include_self would need `module` to be held by a shared_ptr, which it is not yet while
  // its constructor runs; the neck and head keep all their parameters in submodules.
  for (const std::shared_ptr<torch::nn::Module>& m : module.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2dImpl>()) {
      torch::nn::init::kaiming_normal_(conv->weight);
    } else if (auto* deconv = m->as<torch::nn::ConvTranspose2dImpl>()) {
      torch::nn::init::kaiming_normal_(deconv->weight);
    } else if (auto* bn = m->as<core::BatchNorm2dImpl>()) {
      bn->weight.fill_(1.0);
      bn->bias.fill_(1e-4);
    }
  }
}

necks::Fpn MakeDBNeck(std::vector<int64_t> in_channels, int64_t inner_channels) {
  TORCH_CHECK(in_channels.size() == 4,
              "DBNet neck: needs 4 backbone levels (strides 4, 8, 16, 32), got ",
              in_channels.size());
  TORCH_CHECK(inner_channels > 0 && inner_channels % 4 == 0,
              "DBNet neck: inner_channels must be a positive multiple of 4, got ", inner_channels);
  necks::Fpn neck(necks::FpnOptions(std::move(in_channels), inner_channels / 4)
                      .inner_channels(inner_channels)
                      .bias(false)
                      .torchvision_init(false));
  InitializeDBWeights(*neck);
  return neck;
}

at::Tensor FuseLevels(const std::vector<at::Tensor>& levels) {
  TORCH_CHECK(!levels.empty(), "FuseLevels: no levels");
  std::vector<at::Tensor> upsampled;
  upsampled.reserve(levels.size());
  for (size_t i = levels.size() - 1; i > 0; --i) {
    upsampled.push_back(necks::UpsampleNearestTo(levels[i], levels[0]));
  }
  upsampled.push_back(levels[0]);
  return at::cat(upsampled, 1);
}

DBHeadImpl::DBHeadImpl(DBHeadOptions options) : options_(options) {
  TORCH_CHECK(options_.in_channels() > 0 && options_.in_channels() % 4 == 0,
              "DBHead: in_channels must be a positive multiple of 4, got ", options_.in_channels());
  probability_ = register_module("probability", MakeBranch(options_.in_channels()));
  threshold_ = register_module("threshold", MakeBranch(options_.in_channels()));
  InitializeDBWeights(*this);
}

DBHeadOutput DBHeadImpl::forward(const at::Tensor& fused, bool with_threshold) {
  DBHeadOutput out;
  out.probability = probability_->forward(fused);
  if (with_threshold) {
    out.threshold = threshold_->forward(fused);
    // sigmoid(k (P - T)) is 1 / (1 + exp(-k (P - T))) without overflow in exp.
    out.binary = at::sigmoid(options_.k() * (out.probability - out.threshold));
  }
  return out;
}

}  // namespace vision::models::dbnet
