// The backbone family: a feature extractor returning a pyramid of feature maps.
#ifndef VISION_CORE_BACKBONE_H_
#define VISION_CORE_BACKBONE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

  // Recompute these submodules' forward in backward instead of storing their activations
  // (names as in named_modules(), e.g. "backbone.layer4"; core/activation_checkpoint.h).
  // A backbone that does not support a name returns an error naming it.
  virtual absl::Status EnableActivationCheckpointing(const std::vector<std::string>& submodules) {
    return absl::UnimplementedError(absl::StrCat(
        "activation checkpointing is not supported by this backbone (", name(), ")"));
  }
};

using BackboneRegistry = PluginRegistry<Backbone>;

}  // namespace vision::core

#endif  // VISION_CORE_BACKBONE_H_
