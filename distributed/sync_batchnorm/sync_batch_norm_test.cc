#include "distributed/sync_batchnorm/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/utils.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/batch_norm.h"
#include "core/status_macros.h"
#include "distributed/process_group/multiprocess_testing.h"
#include "distributed/process_group/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::distributed::sync_batchnorm {
namespace {

using process_group::RunRanks;
using ::testing::HasSubstr;

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> Group(int rank, int world, int port) {
  process_group::ProcessGroupOptions options;
  options.rank = rank;
  options.world_size = world;
  options.master_port = port;
  options.timeout = std::chrono::seconds(20);
  return process_group::CreateProcessGroup(options);
}

absl::Status ExpectClose(const std::string& what, const at::Tensor& actual,
                         const at::Tensor& expected, double tolerance = 1e-5) {
  const double error = (actual - expected).abs().max().item<double>();
  const double scale = std::max(1.0, expected.abs().max().item<double>());
  if (error <= tolerance * scale) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": max error ", error, " (scale ", scale, ")"));
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

TEST(SyncBatchNormTest, TwoRanksWithUnequalBatchesMatchBatchNormOnTheConcatenatedBatch) {
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(2, absl::Seconds(60), [port](int rank) -> absl::Status {
    at::set_num_threads(1);
    // Rank 0 holds one sample, rank 1 three: counts differ per rank.
    const int64_t begin = rank == 0 ? 0 : 1;
    const int64_t size = rank == 0 ? 1 : 3;
    torch::manual_seed(3);
    constexpr int kSteps = 2;
    std::vector<at::Tensor> inputs, upstream;
    for (int step = 0; step < kSteps; ++step) {
      // An offset mean makes a naive float E[x^2] - E[x]^2 visibly wrong.
      inputs.push_back(at::randn({4, 3, 5, 5}) * 2 + 5);
      upstream.push_back(at::randn({4, 3, 5, 5}));
    }
    const at::Tensor init_weight = at::randn({3});
    const at::Tensor init_bias = at::randn({3});

    torch::nn::BatchNorm2d reference(3);
    VISION_ASSIGN_OR_RETURN(auto group, Group(rank, 2, port));
    SyncBatchNorm sync(3, group);
    {
      at::NoGradGuard no_grad;
      reference->weight.copy_(init_weight);
      reference->bias.copy_(init_bias);
      sync->weight.copy_(init_weight);
      sync->bias.copy_(init_bias);
    }
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x_full = inputs[step].clone().requires_grad_();
      at::Tensor y_full = reference->forward(x_full);
      // A sum, not a mean: the full loss is the sum of the ranks' losses.
      (y_full * upstream[step]).sum().backward();

      at::Tensor x = inputs[step].narrow(0, begin, size).clone().requires_grad_();
      at::Tensor y = sync->forward(x);
      (y * upstream[step].narrow(0, begin, size)).sum().backward();

      const std::string at_step = absl::StrCat(" (rank ", rank, ", step ", step, ")");
      VISION_RETURN_IF_ERROR(ExpectClose("output" + at_step, y, y_full.narrow(0, begin, size)));
      VISION_RETURN_IF_ERROR(
          ExpectClose("input gradient" + at_step, x.grad(), x_full.grad().narrow(0, begin, size)));
      // Parameter gradients are local; their sum over ranks is the full-batch gradient.
      std::vector<double> grads;
      for (const at::Tensor& g : {sync->weight.grad(), sync->bias.grad()}) {
        for (int64_t c = 0; c < 3; ++c) grads.push_back(g[c].item<double>());
      }
      VISION_ASSIGN_OR_RETURN(const std::vector<double> summed,
                              process_group::SumAcrossRanks(*group, grads));
      const at::Tensor summed_tensor = at::tensor(summed, at::kDouble).to(at::kFloat);
      VISION_RETURN_IF_ERROR(ExpectClose("weight gradient" + at_step, summed_tensor.narrow(0, 0, 3),
                                         reference->weight.grad()));
      VISION_RETURN_IF_ERROR(ExpectClose("bias gradient" + at_step, summed_tensor.narrow(0, 3, 3),
                                         reference->bias.grad()));
      VISION_RETURN_IF_ERROR(
          ExpectClose("running_mean" + at_step, sync->running_mean, reference->running_mean));
      VISION_RETURN_IF_ERROR(
          ExpectClose("running_var" + at_step, sync->running_var, reference->running_var));
      for (at::Tensor p : {reference->weight, reference->bias, sync->weight, sync->bias}) {
        p.mutable_grad().zero_();
      }
    }
    if (sync->num_batches_tracked.item<int64_t>() != kSteps) {
      return absl::InternalError("num_batches_tracked not counted");
    }
    // Eval mode uses the running statistics, like BatchNorm2d.
    sync->eval();
    reference->eval();
    at::NoGradGuard no_grad;
    return ExpectClose("eval output", sync->forward(inputs[0]), reference->forward(inputs[0]));
  }));
}

struct HasCoreBatchNorm : torch::nn::Module {
  HasCoreBatchNorm() { bn = register_module("bn", core::BatchNorm2d(3)); }
  core::BatchNorm2d bn{nullptr};
};

TEST(ConvertSyncBatchNormTest, CoreBatchNormMembersSynchroniseInPlace) {
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(2, absl::Seconds(60), [port](int rank) -> absl::Status {
    at::set_num_threads(1);
    torch::manual_seed(5);
    const at::Tensor input = at::randn({4, 3, 4, 4}) * 3 + 2;
    const at::Tensor upstream = at::randn({4, 3, 4, 4});
    torch::nn::BatchNorm2d reference(3);
    at::Tensor x_full = input.clone().requires_grad_();
    const at::Tensor y_full = reference->forward(x_full);
    (y_full * upstream).sum().backward();

    VISION_ASSIGN_OR_RETURN(auto group, Group(rank, 2, port));
    auto model = std::make_shared<HasCoreBatchNorm>();
    VISION_ASSIGN_OR_RETURN(const int converted, ConvertSyncBatchNorm(*model, group));
    if (converted != 1 || !model->bn->synchronized()) {
      return absl::InternalError(absl::StrCat("expected 1 synchronised layer, got ", converted));
    }
    // Each rank holds half of the batch through the member it calls directly.
    at::Tensor x = input.narrow(0, 2 * rank, 2).clone().requires_grad_();
    at::Tensor y = model->bn->forward(x);
    (y * upstream.narrow(0, 2 * rank, 2)).sum().backward();
    VISION_RETURN_IF_ERROR(ExpectClose("output", y, y_full.narrow(0, 2 * rank, 2)));
    VISION_RETURN_IF_ERROR(
        ExpectClose("input gradient", x.grad(), x_full.grad().narrow(0, 2 * rank, 2)));
    VISION_RETURN_IF_ERROR(
        ExpectClose("running_mean", model->bn->running_mean, reference->running_mean));
    return ExpectClose("running_var", model->bn->running_var, reference->running_var);
  }));
}

struct HasMemberBatchNorm : torch::nn::Module {
  HasMemberBatchNorm() { bn = register_module("bn", torch::nn::BatchNorm2d(2)); }
  torch::nn::BatchNorm2d bn{nullptr};
};

TEST(ConvertSyncBatchNormTest, ReplacesBatchNormsInContainersKeepingState) {
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(2, absl::Seconds(60), [port](int rank) -> absl::Status {
    at::set_num_threads(1);
    VISION_ASSIGN_OR_RETURN(auto group, Group(rank, 2, port));
    // root.features: Sequential(conv, bn, relu); root.heads: ModuleList(Sequential(bn), bn).
    torch::nn::Module root;
    torch::nn::Sequential features(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 4, 1)),
                                   torch::nn::BatchNorm2d(4), torch::nn::ReLU());
    torch::nn::Sequential nested(torch::nn::BatchNorm2d(4));
    torch::nn::ModuleList heads(nested, torch::nn::BatchNorm2d(4));
    root.register_module("features", features);
    root.register_module("heads", heads);
    {
      at::NoGradGuard no_grad;
      auto* first = features->ptr(1)->as<torch::nn::BatchNorm2dImpl>();
      first->weight.fill_(2);
      first->running_mean.fill_(0.5);
      first->num_batches_tracked.fill_(7);
    }
    VISION_ASSIGN_OR_RETURN(const int converted, ConvertSyncBatchNorm(root, group));
    if (converted != 3) return absl::InternalError(absl::StrCat("converted ", converted));
    auto* first = features->ptr(1)->as<SyncBatchNormImpl>();
    auto* in_nested = nested->ptr(0)->as<SyncBatchNormImpl>();
    auto* listed = heads->ptr(1)->as<SyncBatchNormImpl>();
    if (first == nullptr || in_nested == nullptr || listed == nullptr) {
      return absl::InternalError("a BatchNorm2d was not replaced in its container");
    }
    if (root.named_modules("", /*include_self=*/false)["features.1"]->as<SyncBatchNormImpl>() !=
        first) {
      return absl::InternalError("the registered child was not replaced");
    }
    if (first->weight[0].item<float>() != 2 || first->running_mean[0].item<float>() != 0.5f ||
        first->num_batches_tracked.item<int64_t>() != 7) {
      return absl::InternalError("parameters or statistics were not copied");
    }
    // The containers' forward now runs the synchronised layers (collectives on each rank).
    nested->forward(features->forward(at::randn({2, 2, 3, 3})));
    if (first->num_batches_tracked.item<int64_t>() != 8 ||
        in_nested->num_batches_tracked.item<int64_t>() != 1) {
      return absl::InternalError("forward did not go through the SyncBatchNorm layers");
    }
    return absl::OkStatus();
  }));
}

TEST(ConvertSyncBatchNormTest, MemberBatchNormIsAnErrorNamingIt) {
  const int port = process_group::PickFreePort();
  std::vector<absl::Status> statuses =
      RunRanks(2, absl::Seconds(60), [port](int rank) -> absl::Status {
        at::set_num_threads(1);
        VISION_ASSIGN_OR_RETURN(auto group, Group(rank, 2, port));
        torch::nn::Module root;
        torch::nn::Sequential features(torch::nn::BatchNorm2d(2));
        root.register_module("features", features);
        root.register_module("block", std::make_shared<HasMemberBatchNorm>());
        auto converted = ConvertSyncBatchNorm(root, group);
        if (converted.ok()) return absl::InternalError("converted a member BatchNorm2d");
        if (features->ptr(0)->as<torch::nn::BatchNorm2dImpl>() == nullptr) {
          return absl::InternalError("modified the model before failing");
        }
        return converted.status();
      });
  for (const absl::Status& s : statuses) {
    EXPECT_THAT(std::string(s.message()), HasSubstr("BatchNorm2d 'block.bn' is a child of"));
  }
}

TEST(ConvertSyncBatchNormTest, WorldOfOneKeepsBatchNorm) {
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(1, absl::Seconds(30), [port](int rank) -> absl::Status {
    VISION_ASSIGN_OR_RETURN(auto group, Group(0, 1, port));
    torch::nn::Sequential model(torch::nn::BatchNorm2d(2));
    VISION_ASSIGN_OR_RETURN(const int converted, ConvertSyncBatchNorm(*model, group));
    if (converted != 0 || model->ptr(0)->as<torch::nn::BatchNorm2dImpl>() == nullptr) {
      return absl::InternalError("converted with a world of one");
    }
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace vision::distributed::sync_batchnorm
