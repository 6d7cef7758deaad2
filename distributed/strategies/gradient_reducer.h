// The engine behind every gradient-communication strategy: autograd post-accumulation hooks
// mark parameters ready, ready buckets are all-reduced (asynchronously when overlapping), and
// FinishBackward waits for them.
//
// Every parameter's .grad aliases its slice of a bucket's flat buffer (DDP's
// gradient_as_bucket_view), so backward accumulates straight into the buckets and the averages
// land straight in .grad: no copy into a bucket before the collective and none back after.
// An optimizer that releases or replaces a .grad (zero_grad with set_to_none) is handled: the
// next PrepareBackward puts it back into its bucket. With one rank nothing is communicated.
#ifndef VISION_DISTRIBUTED_STRATEGIES_GRADIENT_REDUCER_H_
#define VISION_DISTRIBUTED_STRATEGIES_GRADIENT_REDUCER_H_

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
// Complete types: intrusive_ptr's destructor needs them.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "absl/status/status.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace vision::distributed::strategies {

// How a bucket travels: as the gradients' own dtype or cast down to halve the bytes.
enum class Compression { kNone, kFloat16, kBFloat16 };

struct ReducerOptions {
  // A bucket is closed once it holds this many bytes or more (the parameter that crossed the
  // cap included, as DDP); <= 0 puts every parameter of a dtype into one bucket.
  int64_t bucket_cap_bytes = 0;
  // The first bucket (the last layers' gradients, ready first) closes at
  // min(first_bucket_cap_bytes, bucket_cap_bytes), so communication starts early in backward
  // whatever the cap (DDP's _DEFAULT_FIRST_BUCKET_BYTES, 1 MiB). Unused when
  // bucket_cap_bytes <= 0 (one bucket).
  int64_t first_bucket_cap_bytes = int64_t{1} << 20;
  // True: a bucket is launched from the autograd hook that completes it. False: every bucket
  // is launched in FinishBackward (the plain all-reduce baseline).
  bool overlap = false;
  Compression compression = Compression::kNone;
  bool find_unused_parameters = false;
  // All-reduce the buckets even at world size 1 (BucketedOptions.communicate_at_world_one).
  bool communicate_at_world_one = false;
};

class GradientReducer {
 public:
  explicit GradientReducer(ReducerOptions options) : options_(options) {}
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // `names` is optional (empty, or one per parameter); it makes error messages readable.
  absl::Status Attach(const std::vector<at::Tensor>& params, const std::vector<std::string>& names,
                      c10::intrusive_ptr<c10d::ProcessGroup> group);
  void PrepareBackward(bool sync);
  absl::Status FinishBackward();

  // For tests and logs: each bucket's parameters (indices among those requiring grad), in
  // launch order.
  std::vector<std::vector<int>> BucketLayout() const;

 private:
  struct Bucket {
    std::vector<int> params;       // Indices into params_.
    std::vector<int64_t> offsets;  // Start of each parameter in `flat`.
    at::Tensor flat;               // Gradients, in the parameters' dtype.
    at::Tensor wire;               // What is communicated: `flat` or its compressed copy.
    // With gather_bfloat16_: every rank's bf16 bits, as bytes, summed locally in rank order.
    std::vector<std::vector<at::Tensor>> gathered;
    c10::intrusive_ptr<c10d::Work> work;
    int pending = 0;  // Parameters not yet ready in this step.
    // Tracing only (core/trace.h): when this step's first gradient of the bucket arrived, and
    // the bucket's lane in the timeline.
    int64_t first_ready_us = -1;
    int lane = 0;
  };

  void OnGradReady(int index);
  // Launches buckets in index order, up to the first incomplete one: every rank must issue
  // its collectives in the same order.
  void LaunchReadyBuckets();
  // Waits for collectives still in flight (after a step that failed before FinishBackward),
  // so their buffers can be reused.
  void DrainLaunched();
  void Launch(Bucket& bucket);
  // With tracing on: records the bucket's collective until it completes (on the host for Gloo;
  // with CUDA events, resolved when the trace window ends, for NCCL). No host synchronisation.
  void TraceCollective(Bucket& bucket, int64_t launch_us);
  // Points every parameter's .grad at its slice of its bucket (keeping its value).
  void BindGradients();
  std::string ParamLabel(int index) const;

  const ReducerOptions options_;
  std::vector<at::Tensor> params_;
  std::vector<int> original_index_;  // Position of params_[i] in the list given to Attach.
  std::vector<std::string> names_;   // Indexed like the list given to Attach.
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_param_;
  std::vector<at::Tensor> grad_views_;  // params_[i]'s slice of its bucket, shaped like it.
  // Kept alive so the hooks registered on them persist; a parameter only holds a weak pointer.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  // Gloo has no bfloat16 all-reduce (LibTorch 1.13 rejects it with "Invalid scalar type"), so
  // on Gloo the compressed buckets are all-gathered as bytes instead. For two ranks that moves
  // as many bytes as a ring all-reduce; beyond that it moves more.
  bool gather_bfloat16_ = false;
  // Whether the backend that all-reduces a bucket of that device can average (ReduceOp::AVG):
  // then uncompressed buckets are not divided before the collective.
  bool average_on_cuda_wire_ = false;
  bool average_on_cpu_wire_ = false;
  std::vector<uintptr_t> hook_keys_;

  std::mutex mutex_;  // Hooks may run on autograd device threads.
  bool sync_step_ = false;
  std::vector<bool> ready_;
  size_t next_bucket_ = 0;
  // Problems met inside autograd hooks, where nothing can be returned; FinishBackward reports
  // them.
  std::vector<int> ready_twice_;
  std::string launch_error_;
};

}  // namespace vision::distributed::strategies

#endif  // VISION_DISTRIBUTED_STRATEGIES_GRADIENT_REDUCER_H_
