// The channels-last (NHWC) memory layout of TrainPipelineConfig.memory_format for a model and
// its input images.
#ifndef VISION_ENGINE_MEMORY_FORMAT_H_
#define VISION_ENGINE_MEMORY_FORMAT_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace vision::engine {

// Stores every 4-D parameter and buffer of `module` (convolution weights, mostly) in
// channels-last layout, values and identities unchanged (optimizers, gradient buckets and
// checkpoints keep working on the same tensors; loading a checkpoint copies into this layout).
// Returns how many tensors were converted.
int ToChannelsLast(torch::nn::Module& module);

// `images` ([N, C, H, W]) in channels-last layout; other ranks unchanged.
at::Tensor ImagesToChannelsLast(const at::Tensor& images);

}  // namespace vision::engine

#endif  // VISION_ENGINE_MEMORY_FORMAT_H_
