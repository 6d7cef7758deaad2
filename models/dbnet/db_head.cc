#include "models/dbnet/db_head.h"

#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include "core/batch_norm.h"

namespace vision::models::dbnet {
namespace {

namespace F = torch::nn::functional;

at::Tensor UpsampleTo(const at::Tensor& x, const at::Tensor& like) {
  return F::interpolate(x, F::InterpolateFuncOptions()
                               .size(std::vector<int64_t>{like.size(2), like.size(3)})
                               .mode(torch::kNearest));
}

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

DBNeckImpl::DBNeckImpl(DBNeckOptions options) : options_(std::move(options)) {
  TORCH_CHECK(options_.in_channels().size() == 4,
              "DBNeck: needs 4 backbone levels (strides 4, 8, 16, 32), got ",
              options_.in_channels().size());
  const int64_t inner = options_.inner_channels();
  TORCH_CHECK(inner > 0 && inner % 4 == 0,
              "DBNeck: inner_channels must be a positive multiple of 4, got ", inner);
  for (size_t i = 0; i < 4; ++i) {
    laterals_.push_back(register_module(
        "lateral" + std::to_string(i),
        torch::nn::Conv2d(
            torch::nn::Conv2dOptions(options_.in_channels()[i], inner, 1).bias(false))));
    smooths_.push_back(register_module(
        "smooth" + std::to_string(i),
        torch::nn::Conv2d(torch::nn::Conv2dOptions(inner, inner / 4, 3).padding(1).bias(false))));
  }
  InitializeDBWeights(*this);
}

at::Tensor DBNeckImpl::forward(const std::vector<at::Tensor>& features) {
  TORCH_CHECK(features.size() == 4, "DBNeck: expected 4 feature maps, got ", features.size());
  std::vector<at::Tensor> merged(4);
  merged[3] = laterals_[3](features[3]);
  for (int i = 2; i >= 0; --i) {
    const at::Tensor lateral = laterals_[i](features[i]);
    merged[i] = UpsampleTo(merged[i + 1], lateral) + lateral;
  }
  std::vector<at::Tensor> levels;
  levels.reserve(4);
  for (int i = 3; i >= 0; --i) {
    at::Tensor smoothed = smooths_[i](merged[i]);
    levels.push_back(i == 0 ? smoothed : UpsampleTo(smoothed, merged[0]));
  }
  return at::cat(levels, 1);
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
