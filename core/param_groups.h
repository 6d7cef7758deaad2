// Parameter groups from the optimizer config: weight decay off for normalisation weights and
// biases (when asked), and a learning-rate multiplier for the backbone.
#ifndef VISION_CORE_PARAM_GROUPS_H_
#define VISION_CORE_PARAM_GROUPS_H_

#include <vector>

#include <torch/nn/module.h>

#include "core/config/pipeline.pb.h"
#include "core/optimizer.h"

namespace vision::core {

// Splits the trainable parameters of `model` into up to four groups ("decay", "no_decay",
// "backbone_decay", "backbone_no_decay"; empty ones omitted). `lr` is the already scaled base
// rate. A parameter is in the backbone when its name starts with "backbone."; it is a norm
// parameter when its module's class name contains "Norm" (BatchNorm, SyncBatchNorm,
// FrozenBatchNorm, GroupNorm, LayerNorm, InstanceNorm).
std::vector<ParamGroupSpec> MakeParamGroups(const torch::nn::Module& model,
                                            const OptimizerConfig& config, double lr);

}  // namespace vision::core

#endif  // VISION_CORE_PARAM_GROUPS_H_
