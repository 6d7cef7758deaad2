#include "distributed/sync_batchnorm/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/batch_norm.h"

namespace vision::distributed::sync_batchnorm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Reduction dimensions: all but the channel dimension 1.
std::vector<int64_t> ReduceDims(const at::Tensor& input) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// Shape that broadcasts a per-channel vector against the input: (1, C, 1, ...).
std::vector<int64_t> ChannelShape(const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = input.size(1);
  return shape;
}

void AllReduceSum(c10d::ProcessGroup& group, at::Tensor& tensor) {
  std::vector<at::Tensor> tensors = {tensor};
  group.allreduce(tensors)->wait();
}

c10::intrusive_ptr<c10d::ProcessGroup> GroupOf(AutogradContext* ctx) {
  c10::intrusive_ptr<torch::CustomClassHolder> capsule = ctx->saved_data["group"].toCapsule();
  return c10::intrusive_ptr<c10d::ProcessGroup>::reclaim_copy(
      static_cast<c10d::ProcessGroup*>(capsule.get()));
}

// y = (x - mean) * invstd * weight + bias with globally computed mean and invstd. Its
// backward needs the global sums of dy and dy * (x - mean), hence a custom Function.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& mean,
                            const at::Tensor& invstd, double count,
                            c10::intrusive_ptr<c10d::ProcessGroup> group) {
    const std::vector<int64_t> shape = ChannelShape(input);
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["group"] = c10::IValue::make_capsule(std::move(group));
    return (input - mean.view(shape)) * (invstd * weight).view(shape) + bias.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const std::vector<int64_t> shape = ChannelShape(input);
    const at::Tensor mean = saved[2].view(shape);
    const at::Tensor invstd = saved[3].view(shape);
    const double count = ctx->saved_data["count"].toDouble();
    const at::Tensor grad = grad_outputs[0].contiguous();
    const std::vector<int64_t> dims = ReduceDims(input);

    const at::Tensor xmu = input - mean;
    const at::Tensor sum_dy = grad.sum(dims);
    const at::Tensor sum_dy_xmu = (grad * xmu).sum(dims);
    // Local: the comm strategy averages parameter gradients over ranks afterwards.
    const at::Tensor grad_weight = sum_dy_xmu * invstd.view({-1});
    const at::Tensor grad_bias = sum_dy;

    // Always reduced, even when no input gradient is needed here, so every rank issues the
    // same collectives.
    at::Tensor sums = at::cat({sum_dy, sum_dy_xmu});
    AllReduceSum(*GroupOf(ctx), sums);
    const int64_t channels = input.size(1);
    const at::Tensor mean_dy = (sums.narrow(0, 0, channels) / count).view(shape);
    const at::Tensor mean_dy_xmu = (sums.narrow(0, channels, channels) / count).view(shape);
    const at::Tensor grad_input =
        (grad - mean_dy - xmu * invstd * invstd * mean_dy_xmu) * invstd * weight.view(shape);
    return {grad_input,   grad_weight,  grad_bias,   at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options_,
                                     c10::intrusive_ptr<c10d::ProcessGroup> group)
    : options(std::move(options_)), group_(std::move(group)) {
  reset();
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", at::ones({c}));
    bias = register_parameter("bias", at::zeros({c}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", at::zeros({c}));
    running_var = register_buffer("running_var", at::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  }
}

namespace {

// Training-mode batch norm with statistics over every rank of `group`; updates the running
// statistics (when defined) with the global mean and unbiased variance.
at::Tensor GlobalBatchNorm(const at::Tensor& input, const at::Tensor& w, const at::Tensor& b,
                           at::Tensor running_mean, at::Tensor running_var, double momentum,
                           double eps, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const int64_t channels = input.size(1);
  at::Tensor mean, invstd;
  double count = 0;
  {
    at::NoGradGuard no_grad;
    // Double precision: E[x^2] - E[x]^2 cancels badly in float when |mean| >> std.
    const at::Tensor x = input.detach().to(at::kDouble);
    const std::vector<int64_t> dims = ReduceDims(x);
    // Ranks may hold different numbers of samples (even none): the count travels along.
    at::Tensor stats =
        at::cat({x.sum(dims), x.pow(2).sum(dims),
                 at::full({1}, static_cast<double>(x.numel() / channels), x.options())});
    AllReduceSum(*group, stats);
    count = stats[2 * channels].item<double>();
    TORCH_CHECK(count > 1,
                "SyncBatchNorm: needs more than one value per channel across all "
                "ranks, got ",
                count);
    const at::Tensor global_mean = stats.narrow(0, 0, channels) / count;
    const at::Tensor global_var =
        (stats.narrow(0, channels, channels) / count - global_mean.pow(2)).clamp_min(0);
    mean = global_mean.to(input.scalar_type());
    invstd = (global_var + eps).rsqrt().to(input.scalar_type());
    if (running_mean.defined()) {
      running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.scalar_type()), momentum);
      running_var.mul_(1 - momentum).add_(
          (global_var * (count / (count - 1))).to(running_var.scalar_type()), momentum);
    }
  }
  return SyncBatchNormFunction::apply(input, w, b, mean, invstd, count, group);
}

// Attached to core::BatchNorm2d layers, which count num_batches_tracked themselves.
class C10dBatchNormSync : public core::BatchNormSync {
 public:
  explicit C10dBatchNormSync(c10::intrusive_ptr<c10d::ProcessGroup> group)
      : group_(std::move(group)) {}
  at::Tensor Forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                     at::Tensor& running_mean, at::Tensor& running_var, double momentum,
                     double eps) override {
    return GlobalBatchNorm(input, weight, bias, running_mean, running_var, momentum, eps, group_);
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

}  // namespace

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2 && input.size(1) == options.num_features(),
              "SyncBatchNorm: expected input (N, ", options.num_features(), ", ...), got sizes ",
              input.sizes());
  const at::Tensor w =
      options.affine() ? weight : at::ones({options.num_features()}, input.options());
  const at::Tensor b =
      options.affine() ? bias : at::zeros({options.num_features()}, input.options());
  if (!is_training() && options.track_running_stats()) {
    return at::batch_norm(input, w, b, running_mean, running_var, /*training=*/false,
                          options.momentum(), options.eps(), /*cudnn_enabled=*/false);
  }
  const bool track = is_training() && options.track_running_stats();
  if (track) {
    at::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return GlobalBatchNorm(input, w, b, track ? running_mean : at::Tensor(),
                         track ? running_var : at::Tensor(), options.momentum(), options.eps(),
                         group_);
}

namespace {

struct Replacement {
  torch::nn::Module* parent;
  std::string name;
  std::string path;
  std::shared_ptr<torch::nn::BatchNorm2dImpl> batch_norm;
};

void Collect(torch::nn::Module& module, const std::string& prefix,
             std::vector<Replacement>* found) {
  for (const auto& item : module.named_children()) {
    const std::string path = prefix.empty() ? item.key() : absl::StrCat(prefix, ".", item.key());
    if (auto batch_norm = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(item.value())) {
      found->push_back({&module, item.key(), path, std::move(batch_norm)});
    } else {
      Collect(*item.value(), path, found);
    }
  }
}

SyncBatchNorm MakeSync(const torch::nn::BatchNorm2dImpl& bn,
                       const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  SyncBatchNorm sync(SyncBatchNormOptions(bn.options.num_features())
                         .eps(bn.options.eps())
                         .momentum(bn.options.momentum().value_or(0.1))
                         .affine(bn.options.affine())
                         .track_running_stats(bn.options.track_running_stats()),
                     group);
  at::NoGradGuard no_grad;
  if (bn.options.affine()) {
    sync->weight.copy_(bn.weight);
    sync->bias.copy_(bn.bias);
    sync->weight.set_requires_grad(bn.weight.requires_grad());
    sync->bias.set_requires_grad(bn.bias.requires_grad());
  }
  if (bn.options.track_running_stats()) {
    sync->running_mean.copy_(bn.running_mean);
    sync->running_var.copy_(bn.running_var);
    sync->num_batches_tracked.copy_(bn.num_batches_tracked);
  }
  sync->train(bn.is_training());
  return sync;
}

}  // namespace

absl::StatusOr<int> ConvertSyncBatchNorm(torch::nn::Module& module,
                                         c10::intrusive_ptr<c10d::ProcessGroup> group) {
  if (!group) return absl::InvalidArgumentError("ConvertSyncBatchNorm: no process group");
  if (group->getSize() == 1) {
    std::clog << "ConvertSyncBatchNorm: world size is 1, keeping BatchNorm2d (nothing to "
                 "synchronise)\n";
    return 0;
  }
  // core::BatchNorm2d layers (what the project's models use) take a synchroniser in place.
  auto sync = std::make_shared<C10dBatchNormSync>(group);
  int attached = 0;
  for (const std::shared_ptr<torch::nn::Module>& m : module.modules(/*include_self=*/false)) {
    if (auto* bn = dynamic_cast<core::BatchNorm2dImpl*>(m.get())) {
      bn->SetSync(sync);
      ++attached;
    }
  }
  if (auto* bn = dynamic_cast<core::BatchNorm2dImpl*>(&module)) {
    bn->SetSync(sync);
    ++attached;
  }
  std::vector<Replacement> found;
  if (dynamic_cast<torch::nn::BatchNorm2dImpl*>(&module) != nullptr) {
    return absl::InvalidArgumentError(
        "ConvertSyncBatchNorm: the module itself is a BatchNorm2d; build a SyncBatchNorm");
  }
  Collect(module, "", &found);
  for (const Replacement& r : found) {
    if (r.batch_norm->options.momentum() == c10::nullopt) {
      return absl::UnimplementedError(absl::StrCat(
          "ConvertSyncBatchNorm: BatchNorm2d '", r.path,
          "' uses momentum = None (cumulative average), which SyncBatchNorm does not support"));
    }
    if (dynamic_cast<torch::nn::SequentialImpl*>(r.parent) == nullptr &&
        dynamic_cast<torch::nn::ModuleListImpl*>(r.parent) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ConvertSyncBatchNorm: BatchNorm2d '", r.path, "' is a child of ", r.parent->name(),
          ", which calls it through its own member, so replacing it would have no effect. "
          "Only children of Sequential and ModuleList can be replaced; build that layer as "
          "vision::core::BatchNorm2d (core/batch_norm.h), which synchronises in place"));
    }
  }
  for (const Replacement& r : found) {
    SyncBatchNorm sync = MakeSync(*r.batch_norm, group);
    if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(r.parent)) {
      for (torch::nn::AnyModule& entry : *sequential) {
        if (entry.ptr().get() == r.batch_norm.get()) entry = torch::nn::AnyModule(sync);
      }
    } else {
      auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(r.parent);
      for (std::shared_ptr<torch::nn::Module>& entry : *list) {
        if (entry.get() == r.batch_norm.get()) entry = sync.ptr();
      }
    }
    r.parent->replace_module(r.name, sync.ptr());
  }
  return attached + static_cast<int>(found.size());
}

}  // namespace vision::distributed::sync_batchnorm
