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
#include <torch/nn/modules/conv.h>
#include <torch/utils.h>

#include "core/batch_norm.h"
#include "models/ops/winograd_conv.h"

namespace vision::models::dbnet {
namespace {

torch::nn::Sequential MakeBranch(int64_t in_channels) {
  const int64_t hidden = in_channels / 4;
  return torch::nn::Sequential(
      // ops::Conv2d: Winograd on the CPU when TrainPipelineConfig.cpu_convolution asks.
      ops::Conv2d(torch::nn::Conv2dOptions(in_channels, hidden, 3).padding(1).bias(false)),
      core::BatchNorm2d(hidden), torch::nn::ReLU(),
      torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(hidden, hidden, 2).stride(2)),
      core::BatchNorm2d(hidden), torch::nn::ReLU(),
      torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(hidden, 1, 2).stride(2)),
      torch::nn::Sigmoid());
}

// ConvTranspose2d(kernel 2, stride 2, no padding) of x [N, in, P] (P pixels in any order) in
// phase layout [N, out, 4, P]: entry (o, a * 2 + b, p) is output position (2i + a, 2j + b) of
// channel o for the input pixel p = (i, j) (DBHeadImplementation::kPhaseMatmul).
at::Tensor TransposedConv2x2Phases(const at::Tensor& x,
                                   const torch::nn::ConvTranspose2dImpl& conv) {
  const at::Tensor& weight = conv.weight;  // [in, out, 2, 2]
  const int64_t batch = x.size(0), in = weight.size(0), out = weight.size(1), pixels = x.size(2);
  TORCH_CHECK(weight.size(2) == 2 && weight.size(3) == 2 && x.size(1) == in,
              "DBHead: the phase layout needs 2x2 kernels on ", in, " channels, got weight ",
              weight.sizes(), " for input ", x.sizes());
  // Row o * 4 + a * 2 + b of the matrix is weight[:, o, a, b].
  const at::Tensor matrix = weight.permute({1, 2, 3, 0}).reshape({out * 4, in});
  const at::Tensor bias = conv.bias.repeat_interleave(4).view({1, out * 4, 1});
  return at::baddbmm(bias, matrix.expand({batch, out * 4, in}), x).view({batch, out, 4, pixels});
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

at::Tensor DBHeadImpl::Branch(torch::nn::Sequential& branch, const at::Tensor& fused) {
  if (options_.implementation() == DBHeadImplementation::kModules) return branch->forward(fused);
  // MakeBranch's modules 0-2 as they are, then 3-7 with the transposed convolutions in
  // phase layout.
  const at::Tensor hidden =
      branch[2]->as<torch::nn::ReLU>()->forward(branch[1]->as<core::BatchNorm2d>()->forward(
          branch[0]->as<ops::Conv2d>()->forward(fused)));
  const int64_t batch = hidden.size(0), channels = hidden.size(1), height = hidden.size(2),
                width = hidden.size(3), pixels = height * width;
  // [N, C, 4, h * w]: a 4-D tensor whose per-channel values are those of [N, C, 2h, 2w], so
  // BatchNorm (local or synchronised) computes the same statistics.
  at::Tensor up = TransposedConv2x2Phases(hidden.reshape({batch, channels, pixels}),
                                          *branch[3]->as<torch::nn::ConvTranspose2d>());
  up = branch[5]->as<torch::nn::ReLU>()->forward(branch[4]->as<core::BatchNorm2d>()->forward(up));
  // The input pixel (2i + a, 2j + b) is entry (a * 2 + b, i * w + j) of `up`: the product
  // treats all 4 * h * w alike and gives [N, out, (c, d), (a, b), h * w], where (c, d) is
  // the position within the second 2x2 block: output row 4i + 2a + c, column 4j + 2b + d.
  const auto& last = *branch[6]->as<torch::nn::ConvTranspose2d>();
  const int64_t out = last.weight.size(1);
  const at::Tensor phases = TransposedConv2x2Phases(up.view({batch, channels, 4 * pixels}), last);
  const at::Tensor map = phases.view({batch, out, 2, 2, 2, 2, height, width})
                             .permute({0, 1, 6, 4, 2, 7, 5, 3})
                             .reshape({batch, out, 4 * height, 4 * width});
  return branch[7]->as<torch::nn::Sigmoid>()->forward(map);
}

DBHeadOutput DBHeadImpl::forward(const at::Tensor& fused, bool with_threshold) {
  DBHeadOutput out;
  out.probability = Branch(probability_, fused);
  if (with_threshold) {
    out.threshold = Branch(threshold_, fused);
    // sigmoid(k (P - T)) is 1 / (1 + exp(-k (P - T))) without overflow in exp.
    out.binary = at::sigmoid(options_.k() * (out.probability - out.threshold));
  }
  return out;
}

}  // namespace vision::models::dbnet
