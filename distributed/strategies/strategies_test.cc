// N ranks with per-rank batch B must train exactly like one process with batch N*B: the loss is
// a mean over the local batch, so the average of the ranks' gradients is the full-batch one.
#include "distributed/strategies/strategies.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/trace.h"
#include "distributed/process_group/multiprocess_testing.h"
#include "distributed/process_group/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::distributed::strategies {
namespace {

using process_group::RunRanks;
using ::testing::HasSubstr;

constexpr int kSteps = 5;
constexpr int kGlobalBatch = 8;
constexpr double kLearningRate = 0.1;

struct Net : torch::nn::Module {
  explicit Net(bool with_unused) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 6, 3)));
    // Registered between used layers so its bucket is neither the first nor the last.
    if (with_unused) unused = register_module("unused", torch::nn::Linear(6, 2));
    fc = register_module("fc", torch::nn::Linear(6, 3));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = at::relu(conv1->forward(x));
    h = at::relu(conv2->forward(h));
    return fc->forward(h.mean({2, 3}));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear unused{nullptr}, fc{nullptr};
};

struct Scenario {
  std::string strategy;  // Empty: no communication (the single-process reference).
  google::protobuf::Any options;
  int micro_steps = 1;
  bool with_unused = false;
  // Release the gradients after each step (zero_grad with set_to_none, LibTorch 2.x's
  // default) instead of zeroing them in place.
  bool release_grads = false;
  // Process group backend: "gloo" or "shm" (shared memory within the host).
  std::string backend = "gloo";
};

google::protobuf::Any BucketOptions(double cap_mb, bool find_unused = false) {
  BucketedOptions options;
  options.set_bucket_cap_mb(cap_mb);
  options.set_find_unused_parameters(find_unused);
  google::protobuf::Any any;
  any.PackFrom(options);
  return any;
}

// The global batch of step `step`, identical in every process.
std::pair<at::Tensor, at::Tensor> GlobalBatch(int step) {
  torch::manual_seed(1000 + step);
  return {at::randn({kGlobalBatch, 3, 8, 8}), at::randn({kGlobalBatch, 3})};
}

// Trains kSteps SGD steps on this rank's share of each global batch and returns the final
// parameters. Rank r starts from seed 7 + r, so equality also proves the initial broadcast.
absl::StatusOr<std::vector<at::Tensor>> Train(const Scenario& setup, int rank, int world,
                                              c10::intrusive_ptr<c10d::ProcessGroup> group,
                                              std::vector<double>* local_grad_norms = nullptr) {
  torch::manual_seed(7 + rank);
  Net net(setup.with_unused);
  std::unique_ptr<core::CommStrategy> strategy;
  if (!setup.strategy.empty()) {
    VISION_RETURN_IF_ERROR(process_group::BroadcastParameters(*group, net));
    VISION_ASSIGN_OR_RETURN(
        strategy, core::CommStrategyRegistry::Get().Create(setup.strategy, setup.options));
    std::vector<std::string> names;
    for (const auto& item : net.named_parameters()) names.push_back(item.key());
    VISION_RETURN_IF_ERROR(strategy->Attach(net.parameters(), names, group));
  }
  const int local_batch = kGlobalBatch / world;
  const int micro_batch = local_batch / setup.micro_steps;
  for (int step = 0; step < kSteps; ++step) {
    auto [inputs, targets] = GlobalBatch(step);
    for (int micro = 0; micro < setup.micro_steps; ++micro) {
      const int64_t begin = rank * local_batch + micro * micro_batch;
      const bool sync = micro + 1 == setup.micro_steps;
      if (strategy) strategy->PrepareBackward(sync);
      at::Tensor out = net.forward(inputs.narrow(0, begin, micro_batch));
      at::Tensor loss = (out - targets.narrow(0, begin, micro_batch)).pow(2).mean();
      (loss / setup.micro_steps).backward();
      if (strategy && !sync && local_grad_norms != nullptr && step == 0) {
        local_grad_norms->push_back(net.fc->weight.grad().norm().item<double>());
      }
      if (strategy && sync) {
        VISION_RETURN_IF_ERROR(strategy->FinishBackward());
      }
    }
    at::NoGradGuard no_grad;
    for (at::Tensor& p : net.parameters()) {
      if (!p.grad().defined()) continue;
      p.sub_(p.grad(), kLearningRate);
      if (setup.release_grads) {
        p.mutable_grad() = at::Tensor();
      } else {
        p.mutable_grad().zero_();
      }
    }
  }
  std::vector<at::Tensor> params;
  for (const at::Tensor& p : net.parameters()) params.push_back(p.detach().clone());
  return params;
}

// Largest ||a - b|| / ||b|| over the parameter tensors.
double MaxRelativeError(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).norm().item<double>() / b[i].norm().item<double>());
  }
  return worst;
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> Group(int rank, int world, int port,
                                                             const std::string& backend = "gloo") {
  process_group::ProcessGroupOptions options;
  options.backend = backend;
  options.rank = rank;
  options.world_size = world;
  options.master_port = port;
  options.timeout = std::chrono::seconds(20);
  return process_group::CreateProcessGroup(options);
}

// Runs `setup` on `world` ranks; every rank compares its result with the single-process
// reference it computes itself and fails above `tolerance`.
std::vector<absl::Status> RunEquivalence(const Scenario& setup, int world, double tolerance) {
  const int port = process_group::PickFreePort();
  return RunRanks(world, absl::Seconds(90), [&](int rank) -> absl::Status {
    at::set_num_threads(1);
    Scenario reference_setup;
    reference_setup.with_unused = setup.with_unused;
    VISION_ASSIGN_OR_RETURN(const std::vector<at::Tensor> reference,
                            Train(reference_setup, 0, 1, {}));
    VISION_ASSIGN_OR_RETURN(auto group, Group(rank, world, port, setup.backend));
    VISION_ASSIGN_OR_RETURN(const std::vector<at::Tensor> trained,
                            Train(setup, rank, world, group));
    // The parameters must have moved, or equality would prove nothing.
    torch::manual_seed(7);
    const double moved = MaxRelativeError(Net(setup.with_unused).parameters(), reference);
    const double error = MaxRelativeError(trained, reference);
    std::cerr << absl::StrCat(setup.strategy, " rank ", rank, "/", world, ": relative error ",
                              error, ", weights moved by ", moved, "\n");
    if (moved < 10 * tolerance) {
      return absl::InternalError(absl::StrCat("training barely moved the weights: ", moved));
    }
    if (error > tolerance) {
      return absl::InternalError(absl::StrCat(setup.strategy, " on rank ", rank,
                                              ": relative error ", error, " > ", tolerance));
    }
    return absl::OkStatus();
  });
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

TEST(StrategiesTest, AllReduceMatchesFullBatch) {
  ExpectAllOk(RunEquivalence({"allreduce", {}, 1, false}, 2, 1e-5));
}

TEST(StrategiesTest, BucketedWithSeveralBucketsMatchesFullBatch) {
  // 0.0004 MiB = 104 floats: conv2's weight (216 floats) gets a bucket of its own.
  ExpectAllOk(RunEquivalence({"bucketed", BucketOptions(0.0004), 1, false}, 2, 1e-5));
}

// Gradients alias the buckets; an optimizer that drops them must not break that.
TEST(StrategiesTest, ReleasedGradientsAreRebound) {
  Scenario setup{"bucketed", BucketOptions(0.0004), 2, false};
  setup.release_grads = true;
  ExpectAllOk(RunEquivalence(setup, 2, 1e-5));
}

TEST(StrategiesTest, GradientsAliasTheirBuckets) {
  const int port = process_group::PickFreePort();
  // In a child process, like every test here: a process group's threads in this process
  // would be unsafe across the forks of later tests.
  std::vector<absl::Status> statuses = RunRanks(1, absl::Seconds(30), [&](int rank) {
    VISION_ASSIGN_OR_RETURN(auto group, Group(0, 1, port));
    BucketedOptions options;
    options.set_bucket_cap_mb(0.0004);
    VISION_ASSIGN_OR_RETURN(auto strategy, BucketedStrategy::Create(options));
    torch::manual_seed(0);
    Net net(false);
    VISION_RETURN_IF_ERROR(strategy->Attach(net.parameters(), {}, group));
    const std::vector<at::Tensor> params = net.parameters();
    std::vector<const void*> before;
    for (const at::Tensor& p : params) before.push_back(p.grad().data_ptr());
    strategy->PrepareBackward(true);
    net.forward(at::randn({2, 3, 8, 8})).sum().backward();
    VISION_RETURN_IF_ERROR(strategy->FinishBackward());
    for (size_t i = 0; i < params.size(); ++i) {
      // Backward accumulated in place: the same memory, now holding a gradient.
      if (params[i].grad().data_ptr() != before[i]) {
        return absl::InternalError(absl::StrCat("parameter ", i, "'s gradient moved"));
      }
      if (!(params[i].grad().abs().sum().item<double>() > 0)) {
        return absl::InternalError(absl::StrCat("parameter ", i, " got no gradient"));
      }
    }
    return absl::OkStatus();
  });
  ExpectAllOk(statuses);
}

// At one rank the buckets travel only when asked (communicate_at_world_one: how a one-GPU run
// exercises NCCL's path and traces its overlap with backward); training is the same either way.
TEST(StrategiesTest, CommunicateAtWorldOneSendsBucketsAndTrainsUnchanged) {
  const std::string dir =
      std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp";
  for (const bool communicate : {false, true}) {
    BucketedOptions options;
    options.set_bucket_cap_mb(0.0004);
    options.set_communicate_at_world_one(communicate);
    Scenario setup{"bucketed", {}, 1, false};
    setup.options.PackFrom(options);
    const int port = process_group::PickFreePort();
    ExpectAllOk(RunRanks(1, absl::Seconds(30), [&](int rank) -> absl::Status {
      at::set_num_threads(1);
      VISION_ASSIGN_OR_RETURN(const std::vector<at::Tensor> reference, Train({}, 0, 1, {}));
      VISION_ASSIGN_OR_RETURN(auto group, Group(rank, 1, port));
      core::trace::Start(rank);
      absl::StatusOr<std::vector<at::Tensor>> trained = Train(setup, rank, 1, group);
      core::trace::Stop();
      if (!trained.ok()) return trained.status();
      const std::string path = absl::StrCat(dir, "/world_one_", communicate, ".json");
      VISION_RETURN_IF_ERROR(core::trace::WriteChromeTrace(path));
      std::ifstream file(path);
      const std::string trace((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
      // One span per bucket and step when sent (2 buckets at this cap), none otherwise.
      int allreduces = 0;
      for (size_t at = trace.find(" allreduce\""); at != std::string::npos;
           at = trace.find(" allreduce\"", at + 1)) {
        ++allreduces;
      }
      if (communicate ? allreduces == 0 || allreduces % kSteps != 0 : allreduces != 0) {
        return absl::InternalError(absl::StrCat("communicate_at_world_one ", communicate, ": ",
                                                allreduces, " bucket all-reduce spans in ", kSteps,
                                                " steps"));
      }
      const double error = MaxRelativeError(*trained, reference);
      if (error > 1e-6) {
        return absl::InternalError(absl::StrCat("communicate_at_world_one ", communicate,
                                                ": relative error ", error, " > 1e-6"));
      }
      return absl::OkStatus();
    }));
  }
}

TEST(StrategiesTest, BucketedAcrossFourRanksMatchesFullBatch) {
  ExpectAllOk(RunEquivalence({"bucketed", BucketOptions(0.0004), 1, false}, 4, 1e-5));
}

TEST(StrategiesTest, Fp16CompressIsCloseToFullBatch) {
  // fp16 keeps 11 significant bits: measured 1.8e-4 relative error after 5 steps.
  ExpectAllOk(RunEquivalence({"fp16_compress", BucketOptions(0.0004), 1, false}, 2, 1e-3));
}

TEST(StrategiesTest, Bf16CompressIsCloseToFullBatch) {
  // bf16 keeps 8 significant bits: measured 2.6e-4 relative error after 5 steps.
  ExpectAllOk(RunEquivalence({"bf16_compress", BucketOptions(0.0004), 1, false}, 2, 3e-3));
}

TEST(StrategiesTest, AccumulationMatchesFullBatch) {
  ExpectAllOk(RunEquivalence({"bucketed", BucketOptions(0.0004), 2, false}, 2, 1e-5));
  ExpectAllOk(RunEquivalence({"allreduce", {}, 2, false}, 2, 1e-5));
}

TEST(StrategiesTest, AccumulationMicroStepDoesNotCommunicate) {
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(2, absl::Seconds(60), [&](int rank) -> absl::Status {
    at::set_num_threads(1);
    VISION_ASSIGN_OR_RETURN(auto group, Group(rank, 2, port));
    std::vector<double> norms;
    VISION_RETURN_IF_ERROR(
        Train({"bucketed", BucketOptions(0.0004), 2, false}, rank, 2, group, &norms).status());
    // Each rank saw different data: after a local micro-step the gradients must differ.
    std::vector<double> per_rank(2, 0.0);
    per_rank[rank] = norms.at(0);
    VISION_ASSIGN_OR_RETURN(const std::vector<double> gathered,
                            process_group::SumAcrossRanks(*group, per_rank));
    if (gathered[0] == gathered[1]) {
      return absl::InternalError("gradients were averaged on a non-sync micro-step");
    }
    return absl::OkStatus();
  }));
}

TEST(StrategiesTest, UnusedParameterIsAnErrorNamingIt) {
  for (const char* strategy : {"allreduce", "bucketed"}) {
    google::protobuf::Any options =
        std::string(strategy) == "bucketed" ? BucketOptions(0.0004) : google::protobuf::Any();
    std::vector<absl::Status> statuses = RunEquivalence({strategy, options, 1, true}, 2, 1e-5);
    for (const absl::Status& s : statuses) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << strategy << ": " << s;
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr("no gradient reached parameter #4 'unused.weight', parameter #5 "
                            "'unused.bias'"));
    }
  }
}

TEST(StrategiesTest, UnusedParameterAllowedByOptionTrainsCorrectly) {
  AllReduceOptions allreduce;
  allreduce.set_find_unused_parameters(true);
  google::protobuf::Any any;
  any.PackFrom(allreduce);
  ExpectAllOk(RunEquivalence({"allreduce", any, 1, true}, 2, 1e-5));
  ExpectAllOk(RunEquivalence({"bucketed", BucketOptions(0.0004, true), 1, true}, 2, 1e-5));
}

TEST(StrategiesTest, SecondBackwardInASyncStepIsAnError) {
  const int port = process_group::PickFreePort();
  std::vector<absl::Status> statuses = RunRanks(1, absl::Seconds(30), [&](int rank) {
    VISION_ASSIGN_OR_RETURN(auto group, Group(0, 1, port));
    VISION_ASSIGN_OR_RETURN(auto strategy, BucketedStrategy::Create(BucketedOptions()));
    torch::manual_seed(0);
    Net net(false);
    VISION_RETURN_IF_ERROR(strategy->Attach(net.parameters(), {}, group));
    strategy->PrepareBackward(true);
    const at::Tensor x = at::randn({2, 3, 8, 8});
    net.forward(x).sum().backward();
    net.fc->forward(at::randn({2, 6})).sum().backward();
    return strategy->FinishBackward();
  });
  EXPECT_THAT(std::string(statuses[0].message()),
              HasSubstr("parameter #4, parameter #5 received gradients from more than one "
                        "backward"));
}

TEST(StrategiesTest, FirstBucketClosesAtItsOwnSmallerCap) {
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(1, absl::Seconds(30), [&](int rank) -> absl::Status {
    ReducerOptions options;
    options.bucket_cap_bytes = 1000;
    options.first_bucket_cap_bytes = 100;
    options.overlap = true;
    GradientReducer reducer(options);
    VISION_ASSIGN_OR_RETURN(auto group, Group(0, 1, port));
    torch::manual_seed(0);
    Net net(false);
    VISION_RETURN_IF_ERROR(reducer.Attach(net.parameters(), {}, group));
    // Bytes in reverse order: fc.b 12, fc.w 72, conv2.b 24 (108 >= 100 closes the first
    // bucket), conv2.w 864, conv1.b 16, conv1.w 432 (1312 >= 1000). With 1000 for the first
    // bucket too, everything would share one bucket.
    const std::vector<std::vector<int>> expected = {{5, 4, 3}, {2, 1, 0}};
    if (reducer.BucketLayout() != expected) {
      std::string layout;
      for (const auto& bucket : reducer.BucketLayout()) {
        layout += absl::StrCat("{", absl::StrJoin(bucket, ","), "}");
      }
      return absl::InternalError(absl::StrCat("unexpected layout ", layout));
    }
    return absl::OkStatus();
  }));
}

TEST(StrategiesTest, BucketsFollowReverseParameterOrderAndCap) {
  // Attach needs a group; the layout is computed before any collective, so a world of one
  // (rank 0 hosting its own store) is enough.
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(1, absl::Seconds(30), [&](int rank) -> absl::Status {
    BucketedOptions options;
    options.set_bucket_cap_mb(0.0004);
    VISION_ASSIGN_OR_RETURN(auto made, BucketedStrategy::Create(options));
    VISION_ASSIGN_OR_RETURN(auto group, Group(0, 1, port));
    torch::manual_seed(0);
    Net net(false);
    VISION_RETURN_IF_ERROR(made->Attach(net.parameters(), {}, group));
    // Parameters: conv1.w (108), conv1.b (4), conv2.w (216), conv2.b (6), fc.w (18), fc.b (3).
    // As DDP: a bucket is closed once it holds 419 bytes or more, with the parameter that
    // crossed the cap inside, so each weight shares its bias's bucket.
    const std::vector<std::vector<int>> expected = {{5, 4, 3, 2}, {1, 0}};
    if (made->BucketLayout() != expected) {
      std::string layout;
      for (const auto& bucket : made->BucketLayout()) {
        layout += absl::StrCat("{", absl::StrJoin(bucket, ","), "}");
      }
      return absl::InternalError(absl::StrCat("unexpected layout ", layout));
    }
    return absl::OkStatus();
  }));
}

TEST(StrategiesTest, RejectsNonPositiveBucketCap) {
  BucketedOptions options;
  options.set_bucket_cap_mb(0);
  EXPECT_THAT(std::string(BucketedStrategy::Create(options).status().message()),
              HasSubstr("bucket_cap_mb must be a positive number"));
}

// The equivalences again with the all-reduces through shared memory (distributed/shm).
Scenario OnShm(Scenario setup) {
  setup.backend = "shm";
  return setup;
}

TEST(StrategiesShmTest, AllReduceAndBucketedMatchFullBatch) {
  ExpectAllOk(RunEquivalence(OnShm({"allreduce", {}, 1, false}), 2, 1e-5));
  ExpectAllOk(RunEquivalence(OnShm({"bucketed", BucketOptions(0.0004), 1, false}), 2, 1e-5));
  ExpectAllOk(RunEquivalence(OnShm({"bucketed", BucketOptions(0.0004), 1, false}), 4, 1e-5));
}

TEST(StrategiesShmTest, AccumulationMatchesFullBatch) {
  Scenario released = OnShm({"bucketed", BucketOptions(0.0004), 2, false});
  released.release_grads = true;
  ExpectAllOk(RunEquivalence(released, 2, 1e-5));
  ExpectAllOk(RunEquivalence(OnShm({"allreduce", {}, 2, false}), 4, 1e-5));
}

TEST(StrategiesShmTest, CompressionIsCloseToFullBatch) {
  ExpectAllOk(RunEquivalence(OnShm({"fp16_compress", BucketOptions(0.0004), 1, false}), 2, 1e-3));
  ExpectAllOk(RunEquivalence(OnShm({"bf16_compress", BucketOptions(0.0004), 1, false}), 2, 3e-3));
  ExpectAllOk(RunEquivalence(OnShm({"bf16_compress", BucketOptions(0.0004), 1, false}), 4, 3e-3));
}

TEST(StrategiesShmTest, UnusedParameters) {
  ExpectAllOk(RunEquivalence(OnShm({"bucketed", BucketOptions(0.0004, true), 1, true}), 2, 1e-5));
  for (const absl::Status& s :
       RunEquivalence(OnShm({"bucketed", BucketOptions(0.0004), 1, true}), 2, 1e-5)) {
    EXPECT_THAT(std::string(s.message()), HasSubstr("no gradient reached parameter #4"));
  }
}

// Two ranks: a + b is the same sum whichever backend adds it, so the trained weights must be
// bit-identical to Gloo's (bf16_compress differs by design: on Gloo it sums in float).
TEST(StrategiesShmTest, TwoRanksTrainBitIdenticallyToGloo) {
  const int gloo_port = process_group::PickFreePort();
  const int shm_port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(2, absl::Seconds(90), [&](int rank) -> absl::Status {
    at::set_num_threads(1);
    VISION_ASSIGN_OR_RETURN(auto gloo, Group(rank, 2, gloo_port, "gloo"));
    VISION_ASSIGN_OR_RETURN(auto shm, Group(rank, 2, shm_port, "shm"));
    for (const Scenario& setup : {Scenario{"allreduce", {}, 2, false},
                                  Scenario{"bucketed", BucketOptions(0.0004), 1, false},
                                  Scenario{"fp16_compress", BucketOptions(0.0004), 1, false}}) {
      VISION_ASSIGN_OR_RETURN(const std::vector<at::Tensor> a, Train(setup, rank, 2, gloo));
      VISION_ASSIGN_OR_RETURN(const std::vector<at::Tensor> b, Train(setup, rank, 2, shm));
      for (size_t i = 0; i < a.size(); ++i) {
        if (!at::equal(a[i], b[i])) {
          return absl::InternalError(
              absl::StrCat(setup.strategy, ": parameter ", i, " differs between gloo and shm"));
        }
      }
    }
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace vision::distributed::strategies
