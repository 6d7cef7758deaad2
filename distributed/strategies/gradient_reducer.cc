#include "distributed/strategies/gradient_reducer.h"

#include <ATen/ATen.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <exception>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/trace.h"

#ifdef VISION_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#endif

namespace vision::distributed::strategies {
namespace {

at::ScalarType WireType(Compression compression, at::ScalarType grad_type) {
  switch (compression) {
    case Compression::kFloat16:
      return at::kHalf;
    case Compression::kBFloat16:
      return at::kBFloat16;
    case Compression::kNone:
      break;
  }
  return grad_type;
}

}  // namespace

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
}

absl::Status GradientReducer::Attach(const std::vector<at::Tensor>& params,
                                     const std::vector<std::string>& names,
                                     c10::intrusive_ptr<c10d::ProcessGroup> group) {
  if (group_) return absl::FailedPreconditionError("comm strategy: Attach was already called");
  if (!group) return absl::InvalidArgumentError("comm strategy: Attach needs a process group");
  if (!names.empty() && names.size() != params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("comm strategy: ", names.size(), " names for ", params.size(), " parameters"));
  }
  names_ = names;
  // Frozen parameters never get gradients and are not communicated.
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) continue;
    params_.push_back(params[i]);
    original_index_.push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].is_leaf()) {
      return absl::InvalidArgumentError(
          absl::StrCat("comm strategy: ", ParamLabel(static_cast<int>(i)),
                       " is not a leaf tensor; pass the model's parameters themselves"));
    }
  }
  group_ = std::move(group);
  gather_bfloat16_ =
      options_.compression == Compression::kBFloat16 && group_->getBackendName() == "gloo";
  // A group's CUDA tensors go to NCCL when it has NCCL; its CPU tensors to shm when it is a shm
  // group, else to Gloo.
  average_on_cuda_wire_ = group_->getBackendName() == "nccl";
  average_on_cpu_wire_ = group_->getBackendName() == "shm";

  // Reverse order: backward produces the last layers' gradients first, so their bucket fills
  // (and starts communicating) first. As DDP (compute_bucket_assignment_by_size), a bucket is
  // closed once it reaches the cap, with the parameter that crossed it inside: a layer's bias
  // (before its weight in reverse order) then shares the weight's bucket. Closing before the
  // crossing parameter instead cut buckets between bias and weight, and autograd accumulates
  // a convolution's weight before its bias: the weight's bucket was complete first but had to
  // wait for the bias's, and small bias-only buckets each paid a whole collective's latency.
  bucket_of_param_.assign(params_.size(), -1);
  int64_t used = 0;  // Bytes in buckets_.back().
  bool closed = true;
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) {
    const at::Tensor& p = params_[i];
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    if (!closed) {
      const at::Tensor& first = params_[buckets_.back().params.front()];
      closed = first.scalar_type() != p.scalar_type() || first.device() != p.device();
    }
    if (closed) {
      buckets_.emplace_back();
      used = 0;
      closed = false;
    }
    Bucket& bucket = buckets_.back();
    bucket.offsets.push_back(
        bucket.params.empty() ? 0 : bucket.offsets.back() + params_[bucket.params.back()].numel());
    bucket.params.push_back(i);
    bucket_of_param_[i] = static_cast<int>(buckets_.size()) - 1;
    used += bytes;
    int64_t cap = options_.bucket_cap_bytes;
    if (cap > 0 && buckets_.size() == 1 && options_.first_bucket_cap_bytes > 0) {
      cap = std::min(cap, options_.first_bucket_cap_bytes);
    }
    closed = cap > 0 && used >= cap;
  }
  for (Bucket& bucket : buckets_) {
    const at::Tensor& first = params_[bucket.params.front()];
    const int64_t total = bucket.offsets.back() + params_[bucket.params.back()].numel();
    bucket.flat = at::zeros({total}, first.options().requires_grad(false));
  }
  grad_views_.resize(params_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const at::Tensor& p = params_[bucket.params[k]];
      // An alias made with set_ rather than narrow/view: autograd does not mark it as a view,
      // so optimizers may detach_() it in zero_grad (LibTorch refuses that on views).
      at::Tensor alias = at::empty({0}, bucket.flat.options());
      // Same strides as the parameter (the layout AccumulateGrad keeps), if it is dense.
      const c10::DimVector strides = p.is_non_overlapping_and_dense()
                                         ? c10::DimVector(p.strides())
                                         : c10::contiguous_strides(p.sizes());
      alias.set_(bucket.flat.storage(), bucket.offsets[k], p.sizes(), strides);
      grad_views_[bucket.params[k]] = alias;
    }
  }
  BindGradients();

  try {
    for (size_t i = 0; i < params_.size(); ++i) {
      std::shared_ptr<torch::autograd::Node> accumulator =
          torch::autograd::impl::grad_accumulator(params_[i]);
      const int index = static_cast<int>(i);
      // A post hook of AccumulateGrad runs after .grad holds this backward's contribution
      // (a pre-accumulation tensor hook would see only the incoming term).
      hook_keys_.push_back(
          accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
              [this, index](const torch::autograd::variable_list& outputs,
                            const torch::autograd::variable_list&) {
                OnGradReady(index);
                return outputs;
              })));
      accumulators_.push_back(std::move(accumulator));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("comm strategy: registering hooks failed: ", e.what()));
  }
  ready_.assign(params_.size(), false);
  return absl::OkStatus();
}

void GradientReducer::DrainLaunched() {
  for (size_t b = 0; b < next_bucket_; ++b) {
    try {
      if (buckets_[b].work) buckets_[b].work->wait();
    } catch (const std::exception&) {
      // Already failed; that step's error was (or will never be) reported by FinishBackward.
    }
  }
}

void GradientReducer::PrepareBackward(bool sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  DrainLaunched();
  BindGradients();
  sync_step_ = sync;
  ready_twice_.clear();
  launch_error_.clear();
  ready_.assign(params_.size(), false);
  next_bucket_ = 0;
  for (Bucket& bucket : buckets_) {
    bucket.pending = static_cast<int>(bucket.params.size());
    bucket.work.reset();
    bucket.first_ready_us = -1;
  }
}

void GradientReducer::OnGradReady(int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sync_step_) return;
  if (ready_[index]) {
    // A second backward through this parameter: its bucket may already be on the wire.
    ready_twice_.push_back(index);
    return;
  }
  ready_[index] = true;
  Bucket& bucket = buckets_[bucket_of_param_[index]];
  if (core::trace::Enabled()) {
    // The bucket's fill: from its first gradient to its last, on its own lane.
    const int64_t now = core::trace::NowUs();
    if (bucket.first_ready_us < 0) bucket.first_ready_us = now;
    if (bucket.pending == 1) {
      const int b = bucket_of_param_[index];
      if (bucket.lane == 0) bucket.lane = core::trace::NamedLane(absl::StrCat("bucket ", b));
      core::trace::Record(absl::StrCat("bucket ", b, " ready"), "comm", bucket.first_ready_us, now,
                          bucket.lane, {{"bucket", b}, {"params", bucket.params.size()}});
    }
  }
  --bucket.pending;
  if (!options_.overlap || !launch_error_.empty()) return;
  // An exception here would surface as an unrelated autograd failure; keep it for
  // FinishBackward instead.
  try {
    LaunchReadyBuckets();
  } catch (const std::exception& e) {
    launch_error_ = e.what();
  }
}

void GradientReducer::LaunchReadyBuckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Launch(buckets_[next_bucket_++]);
  }
}

void GradientReducer::Launch(Bucket& bucket) {
  // With one rank the average is the gradient itself: nothing to send (unless asked to).
  if (group_->getSize() == 1 && !options_.communicate_at_world_one) return;
  const bool tracing = core::trace::Enabled();
  const int64_t launch_us = tracing ? core::trace::NowUs() : 0;
  at::NoGradGuard no_grad;
  // The gradients already sit in bucket.flat (BindGradients). Uncompressed, on a backend with
  // an average all-reduce (NCCL for CUDA, shm for CPU; not Gloo), the collective divides as it
  // sums and the autograd thread makes no pass over the bucket. Otherwise the bucket is divided
  // first: compressed buckets so that half-precision sums stay in range (as PyTorch's
  // fp16_compress_hook does).
  const at::ScalarType wire_type = WireType(options_.compression, bucket.flat.scalar_type());
  const bool compressed = wire_type != bucket.flat.scalar_type();
  const bool average_on_wire =
      !compressed && (bucket.flat.is_cuda() ? average_on_cuda_wire_ : average_on_cpu_wire_);
  if (!average_on_wire) bucket.flat.div_(group_->getSize());
  bucket.wire = compressed ? bucket.flat.to(wire_type) : bucket.flat;
  std::vector<at::Tensor> tensors = {bucket.wire};
  if (gather_bfloat16_) {
    tensors[0] = bucket.wire.view(at::kByte);
    bucket.gathered.assign(1, {});
    for (int r = 0; r < group_->getSize(); ++r) {
      bucket.gathered[0].push_back(at::empty_like(tensors[0]));
    }
    bucket.work = group_->allgather(bucket.gathered, tensors);
  } else {
    c10d::AllreduceOptions options;
    options.reduceOp = average_on_wire ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
    bucket.work = group_->allreduce(tensors, options);
  }
  if (tracing) TraceCollective(bucket, launch_us);
}

void GradientReducer::TraceCollective(Bucket& bucket, int64_t launch_us) {
  const int b = static_cast<int>(&bucket - buckets_.data());
  if (bucket.lane == 0) bucket.lane = core::trace::NamedLane(absl::StrCat("bucket ", b));
  const int lane = bucket.lane;
  const double bytes = static_cast<double>(bucket.wire.numel() * bucket.wire.element_size());
  // The launch itself (division, compression, handing the collective to the backend) runs on
  // the thread that completed the bucket: autograd's, or the caller of FinishBackward.
  core::trace::Record(absl::StrCat("bucket ", b, " launch"), "comm", launch_us,
                      core::trace::NowUs(), core::trace::ThreadLane(),
                      {{"bucket", b}, {"bytes", bytes}});
  std::string name = absl::StrCat("bucket ", b, gather_bfloat16_ ? " allgather" : " allreduce");
#ifdef VISION_WITH_CUDA
  if (bucket.flat.is_cuda()) {
    // NCCL's future completes on the host as soon as the collective is enqueued; its callbacks
    // run on a stream that waits for the collective. An event recorded there completes with
    // the collective; the start event (on the stream that produced the gradients, which NCCL's
    // stream waits for) marks when the bucket could start on the device. Both are read after
    // the trace window (AddDeferred), never inside backward.
    const c10::DeviceIndex device = bucket.flat.device().index();
    auto start = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    auto end = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    start->record(c10::cuda::getCurrentCUDAStream(device));
    bucket.work->getFuture()->addCallback([end, device](c10::ivalue::Future&) {
      end->record(c10::cuda::getCurrentCUDAStream(device));
    });
    core::trace::AddDeferred([start, end, device, lane, bytes, name = std::move(name)] {
      try {
        torch::cuda::synchronize(device);
        at::cuda::CUDAEvent now_event(cudaEventDefault);
        now_event.record(c10::cuda::getCurrentCUDAStream(device));
        now_event.synchronize();
        const int64_t now_us = core::trace::NowUs();
        // elapsed_time: milliseconds from one event to the other, on the device's clock.
        const auto host_us = [&](at::cuda::CUDAEvent& e) {
          return now_us - static_cast<int64_t>(e.elapsed_time(now_event) * 1000.0);
        };
        core::trace::Record(absl::StrCat(name, " (cuda)"), "comm", host_us(*start), host_us(*end),
                            lane, {{"bytes", bytes}});
      } catch (const std::exception&) {
        // An event that was never recorded (the step failed): no span.
      }
    });
    return;
  }
#endif
  // Gloo completes the future on its worker thread when the collective is done.
  bucket.work->getFuture()->addCallback([launch_us, lane, bytes,
                                         name = std::move(name)](c10::ivalue::Future&) {
    core::trace::Record(name, "comm", launch_us, core::trace::NowUs(), lane, {{"bytes", bytes}});
  });
}

void GradientReducer::BindGradients() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    const at::Tensor& view = grad_views_[i];
    if (grad.defined() && grad.data_ptr() == view.data_ptr()) continue;
    // First call, or the optimizer released the gradient (zero_grad with set_to_none) or
    // replaced it: keep its value, but in the bucket.
    if (grad.defined()) {
      view.copy_(grad);
    } else {
      view.zero_();
    }
    grad = view;
  }
}

absl::Status GradientReducer::FinishBackward() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!group_) return absl::FailedPreconditionError("comm strategy: FinishBackward before Attach");
  if (!sync_step_) return absl::OkStatus();
  sync_step_ = false;
  absl::Status status;
  try {
    if (!launch_error_.empty()) {
      status = absl::InternalError(
          absl::StrCat("comm strategy: launching a gradient all-reduce failed: ", launch_error_));
    } else if (!ready_twice_.empty()) {
      std::sort(ready_twice_.begin(), ready_twice_.end());
      std::vector<std::string> labels;
      for (int i : ready_twice_) labels.push_back(ParamLabel(i));
      status = absl::FailedPreconditionError(absl::StrCat(
          "comm strategy: ", absl::StrJoin(labels, ", "),
          " received gradients from more than one backward in one sync step, after its bucket "
          "may have been sent. Call PrepareBackward(false) before every backward but the last "
          "of a step, or sum the losses into one backward"));
    }
    std::vector<int> unused;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) unused.push_back(static_cast<int>(i));
    }
    if (status.ok() && !unused.empty() && !options_.find_unused_parameters) {
      std::vector<std::string> labels;
      for (int i : unused) labels.push_back(ParamLabel(i));
      status = absl::FailedPreconditionError(
          absl::StrCat("comm strategy: no gradient reached ", absl::StrJoin(labels, ", "), " (of ",
                       params_.size(),
                       " parameters) in this step. Either make every parameter take part in "
                       "the loss, freeze it (requires_grad = false) before training starts, or set "
                       "find_unused_parameters: true in the strategy options"));
    }
    if (!status.ok()) {
      // Launched collectives still write into our buffers: let them finish first.
      DrainLaunched();
      next_bucket_ = 0;
      return status;
    }
    // Unused parameters count as zeros, completing their buckets.
    for (int i : unused) {
      ready_[i] = true;
      --buckets_[bucket_of_param_[i]].pending;
    }
    LaunchReadyBuckets();
    if (group_->getSize() == 1 && !options_.communicate_at_world_one) return absl::OkStatus();
    if (core::trace::Enabled()) {
      const int lane = core::trace::ThreadLane();
      for (size_t b = 0; b < next_bucket_; ++b) {
        const int64_t start = core::trace::NowUs();
        buckets_[b].work->wait();
        core::trace::Record(absl::StrCat("wait bucket ", b), "comm", start, core::trace::NowUs(),
                            lane);
      }
    } else {
      for (size_t b = 0; b < next_bucket_; ++b) buckets_[b].work->wait();
    }

    // The averages land in bucket.flat, which the parameters' .grad alias.
    at::NoGradGuard no_grad;
    for (Bucket& bucket : buckets_) {
      if (gather_bfloat16_) {
        // Same summation order on every rank, so every rank gets bit-identical gradients.
        bucket.flat.zero_();
        for (const at::Tensor& bytes : bucket.gathered[0]) {
          bucket.flat.add_(bytes.view(at::kBFloat16).to(bucket.flat.scalar_type()));
        }
      } else if (!bucket.wire.is_same(bucket.flat)) {
        bucket.flat.copy_(bucket.wire);
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("comm strategy: gradient all-reduce failed: ", e.what()));
  }
  return absl::OkStatus();
}

std::vector<std::vector<int>> GradientReducer::BucketLayout() const {
  std::vector<std::vector<int>> layout;
  for (const Bucket& bucket : buckets_) layout.push_back(bucket.params);
  return layout;
}

std::string GradientReducer::ParamLabel(int index) const {
  const int original = original_index_[index];
  if (names_.empty()) return absl::StrCat("parameter #", original);
  return absl::StrCat("parameter #", original, " '", names_[original], "'");
}

}  // namespace vision::distributed::strategies
