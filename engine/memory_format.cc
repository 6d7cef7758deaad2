#include "engine/memory_format.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace vision::engine {

int ToChannelsLast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  int converted = 0;
  const auto convert = [&converted](at::Tensor& tensor) {
    if (!tensor.defined() || tensor.dim() != 4 ||
        tensor.is_contiguous(at::MemoryFormat::ChannelsLast)) {
      return;
    }
    // set_data keeps the tensor object (the optimizer's and the gradient reducer's handle) and
    // its requires_grad; only the storage and strides change.
    tensor.set_data(tensor.contiguous(at::MemoryFormat::ChannelsLast));
    ++converted;
  };
  for (at::Tensor& parameter : module.parameters()) convert(parameter);
  for (at::Tensor& buffer : module.buffers()) convert(buffer);
  return converted;
}

at::Tensor ImagesToChannelsLast(const at::Tensor& images) {
  if (!images.defined() || images.dim() != 4) return images;
  return images.contiguous(at::MemoryFormat::ChannelsLast);
}

}  // namespace vision::engine
