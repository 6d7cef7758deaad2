#include "engine/optim/multi_tensor.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_maximum.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"

namespace vision::engine::optim {
namespace {

using torch::optim::OptimizerParamGroup;
using torch::optim::OptimizerParamState;
using StateMap =
    std::remove_reference_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;

std::string DtypeName(c10::ScalarType dtype) {
  if (dtype == c10::kHalf) return "float16";
  if (dtype == c10::kBFloat16) return "bfloat16";
  if (dtype == c10::kFloat) return "float32";
  if (dtype == c10::kDouble) return "float64";
  return c10::toString(dtype);
}

// The parameters of one group that have a gradient, split by device and dtype as the
// multi-tensor kernels need them (torch.optim's _group_tensors_by_device_and_dtype), in order.
struct Bucket {
  c10::Device device;
  c10::ScalarType dtype;
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> grads;
};

std::vector<Bucket> Buckets(const std::vector<at::Tensor>& params, Algorithm algorithm,
                            Implementation implementation) {
  std::vector<Bucket> buckets;
  for (const at::Tensor& p : params) {
    const at::Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    TORCH_CHECK(!grad.is_sparse(), "optimizer.implementation: ", ImplementationName(implementation),
                " does not take sparse gradients; use FOR_LOOP");
    auto bucket = std::find_if(buckets.begin(), buckets.end(), [&](const Bucket& b) {
      return b.device == p.device() && b.dtype == p.scalar_type();
    });
    if (bucket == buckets.end()) {
      const std::string reason =
          UnsupportedReason(algorithm, implementation, p.device().type(), p.scalar_type());
      TORCH_CHECK(reason.empty(), "optimizer.implementation: ", reason);
      buckets.push_back(Bucket{p.device(), p.scalar_type(), {}, {}});
      bucket = std::prev(buckets.end());
    }
    bucket->params.push_back(p);
    bucket->grads.push_back(grad);
  }
  return buckets;
}

// torch::optim::SGD::step's arithmetic in the same order (so, on the CPU, where _foreach_*
// loops over the same kernels, the same bits), as torch.optim's _multi_tensor_sgd, except that
// Nesterov's update is computed out of place: the gradients stay as they were.
void ForeachSgd(const torch::optim::SGDOptions& o, const Bucket& b, StateMap& state) {
  std::vector<at::Tensor> update = b.grads;
  if (o.weight_decay() != 0) update = at::_foreach_add(update, b.params, o.weight_decay());
  if (o.momentum() != 0) {
    std::vector<at::Tensor> bufs, continued_bufs, continued_updates;
    for (size_t i = 0; i < b.params.size(); ++i) {
      std::unique_ptr<OptimizerParamState>& slot = state[b.params[i].unsafeGetTensorImpl()];
      if (slot == nullptr) {
        auto created = std::make_unique<torch::optim::SGDParamState>();
        created->momentum_buffer(update[i].clone().detach());
        bufs.push_back(created->momentum_buffer());
        slot = std::move(created);
      } else {
        bufs.push_back(static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer());
        continued_bufs.push_back(bufs.back());
        continued_updates.push_back(update[i]);
      }
    }
    if (!continued_bufs.empty()) {
      at::_foreach_mul_(continued_bufs, o.momentum());
      at::_foreach_add_(continued_bufs, continued_updates, 1 - o.dampening());
    }
    update = o.nesterov() ? at::_foreach_add(update, bufs, o.momentum()) : std::move(bufs);
  }
  at::_foreach_add_(b.params, update, -o.lr());
}

// `skip`, when defined, is a 0-dim float32 tensor on the bucket's device: the kernels leave
// everything unchanged where it holds 1 (read on the device, not on the host).
void FusedSgd(const torch::optim::SGDOptions& o, const Bucket& b, StateMap& state,
              const at::Tensor& skip) {
  const std::optional<at::Tensor> found_inf =
      skip.defined() ? std::optional<at::Tensor>(skip) : std::nullopt;
  if (o.momentum() == 0) {
    at::_fused_sgd_(b.params, b.grads, {}, o.weight_decay(), 0.0, o.lr(), o.dampening(),
                    o.nesterov(), /*maximize=*/false, /*is_first_step=*/false,
                    /*grad_scale=*/std::nullopt, found_inf);
    return;
  }
  // A parameter without a buffer yet starts it from its gradient (is_first_step), as the loop
  // does; one whose gradient was undefined before may sit beside others that have one. Where the
  // step may be skipped on the device, a new buffer starts at zero instead, so that a skipped
  // first step leaves a valid one: momentum * 0 + (1 - dampening) * gradient is the gradient
  // exactly when dampening is 0, which SkipsOnDevice requires.
  struct Part {
    std::vector<at::Tensor> params, grads, bufs;
  } continued, first;
  for (size_t i = 0; i < b.params.size(); ++i) {
    std::unique_ptr<OptimizerParamState>& slot = state[b.params[i].unsafeGetTensorImpl()];
    Part* part = &continued;
    if (slot == nullptr) {
      auto created = std::make_unique<torch::optim::SGDParamState>();
      if (skip.defined()) {
        created->momentum_buffer(at::zeros_like(b.grads[i]));
      } else {
        created->momentum_buffer(at::empty_like(b.grads[i]));
        part = &first;
      }
      slot = std::move(created);
    }
    part->params.push_back(b.params[i]);
    part->grads.push_back(b.grads[i]);
    part->bufs.push_back(static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer());
  }
  for (const Part* part : {&continued, &first}) {
    if (part->params.empty()) continue;
    at::_fused_sgd_(part->params, part->grads, part->bufs, o.weight_decay(), o.momentum(), o.lr(),
                    o.dampening(), o.nesterov(), /*maximize=*/false,
                    /*is_first_step=*/part == &first, /*grad_scale=*/std::nullopt, found_inf);
  }
}

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, decoupled;
};

// The state of a bucket's parameters, created as the loop creates it, with each step counted.
struct AdamLists {
  std::vector<at::Tensor> exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  std::vector<int64_t> steps;
};

template <typename State>
AdamLists TakeAdamState(const Bucket& b, bool amsgrad, StateMap& state) {
  AdamLists lists;
  for (const at::Tensor& p : b.params) {
    std::unique_ptr<OptimizerParamState>& slot = state[p.unsafeGetTensorImpl()];
    if (slot == nullptr) {
      auto created = std::make_unique<State>();
      created->step(0);
      created->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      created->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      if (amsgrad) created->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      slot = std::move(created);
    }
    auto& s = static_cast<State&>(*slot);
    s.step(s.step() + 1);
    lists.exp_avgs.push_back(s.exp_avg());
    lists.exp_avg_sqs.push_back(s.exp_avg_sq());
    if (amsgrad) lists.max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
    lists.steps.push_back(s.step());
  }
  return lists;
}

// torch.optim's _multi_tensor_adam (capturable=False): the loop's arithmetic, except that the
// first moment is updated with one lerp instead of mul and add (one pass less over it).
void ForeachAdam(const AdamHyper& h, const Bucket& b, AdamLists& l) {
  std::vector<at::Tensor> grads = b.grads;
  if (h.weight_decay != 0) {
    if (h.decoupled) {
      at::_foreach_mul_(b.params, 1 - h.lr * h.weight_decay);
    } else {
      grads = at::_foreach_add(grads, b.params, h.weight_decay);
    }
  }
  at::_foreach_lerp_(l.exp_avgs, grads, 1 - h.beta1);
  at::_foreach_mul_(l.exp_avg_sqs, h.beta2);
  at::_foreach_addcmul_(l.exp_avg_sqs, grads, grads, 1 - h.beta2);
  std::vector<at::Tensor> denom;
  if (h.amsgrad) {
    at::_foreach_maximum_(l.max_exp_avg_sqs, l.exp_avg_sqs);
    denom = at::_foreach_sqrt(l.max_exp_avg_sqs);
  } else {
    denom = at::_foreach_sqrt(l.exp_avg_sqs);
  }
  std::vector<at::Scalar> bias_correction2_sqrt, step_size;
  for (int64_t step : l.steps) {
    bias_correction2_sqrt.emplace_back(std::sqrt(1 - std::pow(h.beta2, step)));
    step_size.emplace_back(-(h.lr / (1 - std::pow(h.beta1, step))));
  }
  at::_foreach_div_(denom, bias_correction2_sqrt);
  at::_foreach_add_(denom, h.eps);
  at::_foreach_addcdiv_(b.params, l.exp_avgs, denom, step_size);
}

void FusedAdam(const AdamHyper& h, const Bucket& b, AdamLists& l) {
  // The kernels read each parameter's (already counted) step from a float32 tensor on its
  // device, as torch.optim keeps it; the state keeps an integer, so one copy carries them all.
  at::Tensor steps = at::empty({static_cast<int64_t>(l.steps.size())}, at::kFloat);
  std::copy(l.steps.begin(), l.steps.end(), steps.data_ptr<float>());
  const std::vector<at::Tensor> state_steps = steps.to(b.device).unbind(0);
  if (h.decoupled) {
    at::_fused_adamw_(b.params, b.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, state_steps,
                      h.lr, h.beta1, h.beta2, h.weight_decay, h.eps, h.amsgrad,
                      /*maximize=*/false);
  } else {
    at::_fused_adam_(b.params, b.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, state_steps,
                     h.lr, h.beta1, h.beta2, h.weight_decay, h.eps, h.amsgrad,
                     /*maximize=*/false);
  }
}

// What torch::optim's step() does around its loop: no autograd, except for the closure.
at::Tensor RunClosure(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

}  // namespace

const char* ImplementationName(Implementation implementation) {
  switch (implementation) {
    case Implementation::kAuto:
      return "AUTO";
    case Implementation::kForLoop:
      return "FOR_LOOP";
    case Implementation::kForeach:
      return "FOREACH";
    case Implementation::kFused:
      return "FUSED";
  }
  return "?";
}

std::string UnsupportedReason(Algorithm algorithm, Implementation implementation,
                              c10::DeviceType device_type, c10::ScalarType dtype) {
  if (implementation != Implementation::kFused) return "";
  if (device_type != c10::kCPU && device_type != c10::kCUDA) {
    return absl::StrCat("FUSED runs on CPU and CUDA parameters, not ",
                        c10::DeviceTypeName(device_type, /*lower_case=*/true),
                        " ones; use FOREACH or FOR_LOOP");
  }
  if (!c10::isFloatingType(dtype)) {
    return absl::StrCat("FUSED needs floating-point parameters, not ", DtypeName(dtype),
                        "; use FOREACH or FOR_LOOP");
  }
  if (algorithm == Algorithm::kSgd && device_type == c10::kCPU &&
      (dtype == c10::kHalf || dtype == c10::kBFloat16)) {
    return absl::StrCat("FUSED SGD leaves ", DtypeName(dtype),
                        " parameters on the CPU unchanged (ATen's _fused_sgd_ CPU kernel, torch "
                        "2.11); use FOREACH or FOR_LOOP, or float32 parameters");
  }
  return "";
}

Implementation Resolve(Implementation implementation, Algorithm algorithm,
                       const std::vector<OptimizerParamGroup>& groups) {
  if (implementation != Implementation::kAuto) return implementation;
  bool any = false;
  for (const OptimizerParamGroup& group : groups) {
    for (const at::Tensor& p : group.params()) {
      if (!p.is_cuda()) return Implementation::kForLoop;
      any = true;
    }
  }
  if (!any) return Implementation::kForLoop;
  return algorithm == Algorithm::kSgd ? Implementation::kFused : Implementation::kForeach;
}

MultiTensorSGD::MultiTensorSGD(const std::vector<OptimizerParamGroup>& groups,
                               torch::optim::SGDOptions defaults, Implementation implementation)
    : SGD(groups, std::move(defaults)), implementation_(implementation) {}

at::Tensor MultiTensorSGD::step(LossClosure closure) {
  const Implementation implementation = Resolve(implementation_, Algorithm::kSgd, param_groups_);
  if (implementation == Implementation::kForLoop) return SGD::step(std::move(closure));
  at::NoGradGuard no_grad;
  at::Tensor loss = RunClosure(closure);
  for (OptimizerParamGroup& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    for (const Bucket& bucket : Buckets(group.params(), Algorithm::kSgd, implementation)) {
      if (implementation == Implementation::kFused) {
        at::Tensor skip;
        if (skip_.defined()) {
          TORCH_CHECK(skip_.device() == bucket.device,
                      "MultiTensorSGD::StepUnless: the flag is on ", skip_.device(),
                      ", the parameters on ", bucket.device);
          skip = skip_;
        }
        FusedSgd(options, bucket, state_, skip);
      } else {
        ForeachSgd(options, bucket, state_);
      }
    }
  }
  return loss;
}

bool MultiTensorSGD::SkipsOnDevice() const {
  if (Resolve(implementation_, Algorithm::kSgd, param_groups_) != Implementation::kFused) {
    return false;
  }
  for (const OptimizerParamGroup& group : param_groups_) {
    if (static_cast<const torch::optim::SGDOptions&>(group.options()).dampening() != 0) {
      return false;
    }
  }
  return true;
}

void MultiTensorSGD::StepUnless(const at::Tensor& skip) {
  TORCH_CHECK(SkipsOnDevice(),
              "MultiTensorSGD::StepUnless needs the FUSED implementation and dampening 0");
  TORCH_CHECK(skip.dim() == 0 && skip.scalar_type() == at::kFloat,
              "MultiTensorSGD::StepUnless: the flag must be a 0-dim float32 tensor");
  skip_ = skip;
  try {
    step();
  } catch (...) {
    skip_ = at::Tensor();
    throw;
  }
  skip_ = at::Tensor();
}

template <typename Base, typename BaseOptions>
MultiTensorAdamT<Base, BaseOptions>::MultiTensorAdamT(
    const std::vector<OptimizerParamGroup>& groups, BaseOptions defaults,
    Implementation implementation)
    : Base(groups, std::move(defaults)), implementation_(implementation) {}

template <typename Base, typename BaseOptions>
at::Tensor MultiTensorAdamT<Base, BaseOptions>::step(LossClosure closure) {
  constexpr bool kDecoupled = std::is_same_v<Base, torch::optim::AdamW>;
  using State =
      std::conditional_t<kDecoupled, torch::optim::AdamWParamState, torch::optim::AdamParamState>;
  const Algorithm algorithm = kDecoupled ? Algorithm::kAdamW : Algorithm::kAdam;
  const Implementation implementation = Resolve(implementation_, algorithm, this->param_groups_);
  if (implementation == Implementation::kForLoop) return Base::step(std::move(closure));
  at::NoGradGuard no_grad;
  at::Tensor loss = RunClosure(closure);
  for (OptimizerParamGroup& group : this->param_groups_) {
    const auto& o = static_cast<const BaseOptions&>(group.options());
    const AdamHyper hyper{o.lr(),    std::get<0>(o.betas()), std::get<1>(o.betas()),
                          o.eps(),   o.weight_decay(),       o.amsgrad(),
                          kDecoupled};
    for (const Bucket& bucket : Buckets(group.params(), algorithm, implementation)) {
      AdamLists lists = TakeAdamState<State>(bucket, hyper.amsgrad, this->state_);
      if (implementation == Implementation::kFused) {
        FusedAdam(hyper, bucket, lists);
      } else {
        ForeachAdam(hyper, bucket, lists);
      }
    }
  }
  return loss;
}

template class MultiTensorAdamT<torch::optim::Adam, torch::optim::AdamOptions>;
template class MultiTensorAdamT<torch::optim::AdamW, torch::optim::AdamWOptions>;

}  // namespace vision::engine::optim
