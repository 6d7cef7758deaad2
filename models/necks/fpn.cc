#include "models/necks/fpn.h"

#include <string>

#include <c10/util/Exception.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/nn/init.h>
#include <torch/utils.h>

namespace vision::models::necks {

namespace F = torch::nn::functional;

at::Tensor UpsampleNearestTo(const at::Tensor& x, const at::Tensor& like) {
  return F::interpolate(x, F::InterpolateFuncOptions()
                               .size(std::vector<int64_t>{like.size(2), like.size(3)})
                               .mode(torch::kNearest));
}

FpnImpl::FpnImpl(FpnOptions options) : options_(std::move(options)) {
  const std::vector<int64_t>& in_channels = options_.in_channels();
  TORCH_CHECK(!in_channels.empty(), "Fpn: needs at least one backbone level");
  TORCH_CHECK(options_.inner_channels() > 0 && options_.out_channels() > 0,
              "Fpn: inner_channels and out_channels must be positive, got ",
              options_.inner_channels(), " and ", options_.out_channels());
  // Lateral and smoothing convolution of each level in turn: the order in which they draw
  // their default initialisation, which DBNet's seeded weights depend on.
  for (size_t i = 0; i < in_channels.size(); ++i) {
    TORCH_CHECK(in_channels[i] > 0, "Fpn: in_channels[", i, "] must be positive, got ",
                in_channels[i]);
    laterals_.push_back(register_module(
        "lateral" + std::to_string(i),
        ops::Conv2d(torch::nn::Conv2dOptions(in_channels[i], options_.inner_channels(), 1)
                        .bias(options_.bias()))));
    smooths_.push_back(
        register_module("smooth" + std::to_string(i),
                        ops::Conv2d(torch::nn::Conv2dOptions(options_.inner_channels(),
                                                             options_.out_channels(), 3)
                                        .padding(1)
                                        .bias(options_.bias()))));
  }
  if (options_.torchvision_init()) {
    torch::NoGradGuard no_grad;
    for (std::vector<ops::Conv2d>* convs : {&laterals_, &smooths_}) {
      for (ops::Conv2d& conv : *convs) {
        torch::nn::init::kaiming_uniform_(conv->weight, /*a=*/1.0);
        if (options_.bias()) conv->bias.zero_();
      }
    }
  }
}

std::vector<at::Tensor> FpnImpl::forward(const std::vector<at::Tensor>& features) {
  const size_t n = laterals_.size();
  TORCH_CHECK(features.size() == n, "Fpn: expected ", n,
              " feature maps (one per in_channels entry), got ", features.size());
  std::vector<at::Tensor> merged(n);
  merged[n - 1] = laterals_[n - 1](features[n - 1]);
  for (int64_t i = static_cast<int64_t>(n) - 2; i >= 0; --i) {
    const at::Tensor lateral = laterals_[i](features[i]);
    merged[i] = UpsampleNearestTo(merged[i + 1], lateral) + lateral;
  }
  std::vector<at::Tensor> pyramid;
  pyramid.reserve(n + 1);
  for (size_t i = 0; i < n; ++i) pyramid.push_back(smooths_[i](merged[i]));
  if (options_.extra_max_pool_level()) {
    pyramid.push_back(at::max_pool2d(pyramid.back(), /*kernel_size=*/{1, 1}, /*stride=*/{2, 2}));
  }
  return pyramid;
}

}  // namespace vision::models::necks
