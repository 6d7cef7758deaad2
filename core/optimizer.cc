#include "core/optimizer.h"

#include <c10/util/Exception.h>

namespace vision::core {

void Optimizer::SetLrFactor(double factor) {
  auto& groups = torch_optimizer().param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) {
    groups[i].options().set_lr(base_lrs_[i] * factor);
  }
}

void Optimizer::StepUnless(const at::Tensor& skip) {
  TORCH_CHECK(false, "this optimizer cannot skip a step on the device (SkipsOnDevice() is false)");
}

double Optimizer::lr(size_t index) {
  return torch_optimizer().param_groups().at(index).options().get_lr();
}

}  // namespace vision::core
