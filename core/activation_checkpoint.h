// Activation checkpointing: run a submodule's forward without keeping its intermediate
// activations and recompute them in backward (Chen et al., 2016; torch.utils.checkpoint).
// Trades one extra forward of the submodule for its activation memory.
//
// Gradients equal the plain run's: the recomputation restores the CPU RNG state of the first
// forward and the module's buffers afterwards (so BatchNorm running statistics are updated
// once, not twice), and runs under the same autocast state.
#ifndef VISION_CORE_ACTIVATION_CHECKPOINT_H_
#define VISION_CORE_ACTIVATION_CHECKPOINT_H_

#include <functional>
#include <memory>

#include <torch/nn/module.h>

namespace vision::core {

// `forward(input)` computes `module`'s output. Outside training or with grad mode off it is
// simply called.
at::Tensor CheckpointedForward(const std::shared_ptr<torch::nn::Module>& module,
                               std::function<at::Tensor(const at::Tensor&)> forward,
                               const at::Tensor& input);

}  // namespace vision::core

#endif  // VISION_CORE_ACTIVATION_CHECKPOINT_H_
