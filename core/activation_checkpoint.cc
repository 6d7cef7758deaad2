#include "core/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <ATen/Context.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>

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
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.gpu = at::autocast::is_autocast_enabled(at::kCUDA);
    s.gpu_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    return s;
  }
  void Apply() const {
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_dtype(at::kCUDA, gpu_dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, gpu);
  }
};

struct Recompute : torch::CustomClassHolder {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
  // The default generator of the input's device (CPU, or that CUDA device: dropout on a GPU
  // draws from it), so the recomputation draws the same numbers as the forward did.
  at::Generator generator;
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
    recompute->generator = at::globalContext().defaultGenerator(input.device());
    {
      std::lock_guard<std::mutex> lock(recompute->generator.mutex());
      recompute->rng_state = recompute->generator.get_state();
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
    at::Generator& generator = recompute->generator;
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
