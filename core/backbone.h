// The backbone family: a feature extractor returning a pyramid of feature maps.
#ifndef VISION_CORE_BACKBONE_H_
#define VISION_CORE_BACKBONE_H_

#include <cstdint>
#include <vector>

#include <torch/nn/module.h>

#include "core/plugin.h"

namespace vision::core {

class Backbone : public torch::nn::Module {
 public:
  static constexpr char kFamily[] = "backbone";

  // Feature maps from fine to coarse, one per entry of Strides().
  virtual std::vector<at::Tensor> Forward(const at::Tensor& images) = 0;
  virtual std::vector<int64_t> OutChannels() const = 0;
  // Downsampling factor of each output relative to the input (e.g. 4, 8, 16, 32).
  virtual std::vector<int64_t> Strides() const = 0;
};

using BackboneRegistry = PluginRegistry<Backbone>;

}  // namespace vision::core

#endif  // VISION_CORE_BACKBONE_H_
