#include "core/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>
#include <torch/version.h>

namespace vision::core {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autocast state of the forward, replayed during the recomputation (backward runs on an
// autograd engine thread, where the caller's thread-local autocast state is not set).
struct AutocastState {
  bool cpu = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
  bool gpu = false;
  at::ScalarType gpu_dtype = at::kHalf;

  static AutocastState Current() {
    AutocastState s;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.gpu = at::autocast::is_autocast_enabled(at::kCUDA);
    s.gpu_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
#else
    s.cpu = at::autocast::is_cpu_enabled();
    s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
    s.gpu = at::autocast::is_enabled();
    s.gpu_dtype = at::autocast::get_autocast_gpu_dtype();
#endif
    return s;
  }
  void Apply() const {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_dtype(at::kCUDA, gpu_dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, gpu);
#else
    at::autocast::set_autocast_cpu_dtype(cpu_dtype);
    at::autocast::set_cpu_enabled(cpu);
    at::autocast::set_autocast_gpu_dtype(gpu_dtype);
    at::autocast::set_enabled(gpu);
#endif
  }
};

struct Recompute : torch::CustomClassHolder {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
  at::Tensor rng_state;
  AutocastState autocast;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `anchor` requires grad, so the output does even when `input` does not (the first layer's
  // input is data): otherwise backward would never reach this node and the parameters inside
  // would get no gradient.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& anchor,
                            c10::intrusive_ptr<Recompute> recompute) {
    {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      recompute->rng_state = generator.get_state();
    }
    recompute->autocast = AutocastState::Current();
    ctx->save_for_backward({input});
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(recompute);
    at::NoGradGuard no_grad;
    return recompute->forward(input);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto capsule = ctx->saved_data["recompute"].toCapsule();
    auto recompute = c10::intrusive_ptr<Recompute>::reclaim_copy(static_cast<Recompute*>(capsule.get()));
    const at::Tensor saved = ctx->get_saved_variables()[0];
    at::Tensor input = saved.detach().requires_grad_(saved.requires_grad());

    // Buffers (BatchNorm statistics) as they were, to be put back after the recomputation.
    std::vector<at::Tensor> buffers, before;
    for (const at::Tensor& b : recompute->module->buffers()) {
      buffers.push_back(b);
      before.push_back(b.detach().clone());
    }
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    at::Tensor rng_now;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng_now = generator.get_state();
      generator.set_state(recompute->rng_state);
    }
    const AutocastState caller = AutocastState::Current();
    recompute->autocast.Apply();
    at::Tensor output;
    {
      at::AutoGradMode grad(true);
      output = recompute->forward(input);
    }
    caller.Apply();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng_now);
    }
    // Accumulates into the module's parameters (as the plain backward would) and the input.
    torch::autograd::backward({output}, {grad_outputs[0]});
    // After the backward: the recomputed graph saved the buffers it read.
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(before[i]);
    }
    return {saved.requires_grad() ? input.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CheckpointedForward(const std::shared_ptr<torch::nn::Module>& module,
                               std::function<at::Tensor(const at::Tensor&)> forward,
                               const at::Tensor& input) {
  if (!module->is_training() || !at::GradMode::is_enabled()) return forward(input);
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->module = module;
  recompute->forward = std::move(forward);
  static const at::Tensor anchor = at::ones({}, at::kFloat).requires_grad_(true);
  return CheckpointFunction::apply(input, anchor, recompute);
}

}  // namespace vision::core
