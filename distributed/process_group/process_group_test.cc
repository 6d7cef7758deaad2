#include "distributed/process_group/process_group.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "distributed/process_group/multiprocess_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::distributed::process_group {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ProcessGroupOptions Options(int rank, int world_size, int port, int timeout_ms = 20000) {
  ProcessGroupOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.master_port = port;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  return options;
}

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r];
}

TEST(ProcessGroupTest, CollectivesAgreeAcrossRanks) {
  const int port = PickFreePort();
  ExpectAllOk(RunRanks(3, absl::Seconds(60), [port](int rank) -> absl::Status {
    at::set_num_threads(1);
    VISION_ASSIGN_OR_RETURN(auto group, CreateProcessGroup(Options(rank, 3, port)));
    if (group->getRank() != rank || group->getSize() != 3) {
      return absl::InternalError("wrong rank or size");
    }

    // Broadcast: every rank ends with rank 0's values, for both dtypes.
    at::Tensor weights = at::full({2, 3}, static_cast<float>(rank + 1));
    at::Tensor counter = at::full({4}, static_cast<int64_t>(10 * rank), at::kLong);
    VISION_RETURN_IF_ERROR(BroadcastTensors(*group, {weights, counter}));
    if (!weights.eq(1.0f).all().item<bool>() || !counter.eq(0).all().item<bool>()) {
      return absl::InternalError("broadcast did not copy rank 0's values");
    }

    // Mean of rank+1 over ranks 0..2 is 2; of 3*rank is 3.
    at::Tensor a = at::full({5}, static_cast<float>(rank + 1));
    at::Tensor b = at::full({2, 2}, static_cast<float>(3 * rank));
    VISION_RETURN_IF_ERROR(AllReduceMean(*group, {a, b}));
    if (!a.eq(2.0f).all().item<bool>() || !b.eq(3.0f).all().item<bool>()) {
      return absl::InternalError(
          absl::StrCat("mean wrong: ", a[0].item<float>(), " ", b[0][0].item<float>()));
    }

    VISION_ASSIGN_OR_RETURN(const std::vector<double> sum,
                            SumAcrossRanks(*group, {1.0, 0.5 * rank, rank == 1 ? 7.0 : 0.0}));
    return Expect(sum == std::vector<double>({3.0, 1.5, 7.0}), "SumAcrossRanks wrong");
  }));
}

TEST(ProcessGroupTest, MissingRankIsNamedWithinTimeout) {
  const int port = PickFreePort();
  constexpr int kTimeoutMs = 3000;
  std::vector<absl::Status> statuses =
      RunRanks(3, absl::Seconds(30), [port](int rank) -> absl::Status {
        if (rank == 2) return absl::OkStatus();  // Never joins.
        at::set_num_threads(1);
        const absl::Time start = absl::Now();
        auto group = CreateProcessGroup(Options(rank, 3, port, kTimeoutMs));
        const absl::Duration took = absl::Now() - start;
        if (group.ok()) return absl::InternalError("joined without rank 2");
        if (took > absl::Milliseconds(kTimeoutMs) + absl::Seconds(15)) {
          return absl::InternalError(absl::StrCat("took ", absl::FormatDuration(took)));
        }
        return group.status();
      });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(statuses[rank].code(), absl::StatusCode::kDeadlineExceeded) << statuses[rank];
    EXPECT_THAT(std::string(statuses[rank].message()),
                AllOf(HasSubstr("rank(s) 2 of 3 did not join"), HasSubstr("3000 ms")));
  }
}

TEST(ProcessGroupTest, MissingRankZeroIsNamedWithinTimeout) {
  const int port = PickFreePort();
  constexpr int kTimeoutMs = 3000;
  std::vector<absl::Status> statuses =
      RunRanks(2, absl::Seconds(30), [port](int rank) -> absl::Status {
        if (rank == 0) return absl::OkStatus();  // Never hosts the store.
        at::set_num_threads(1);
        const absl::Time start = absl::Now();
        auto group = CreateProcessGroup(Options(rank, 2, port, kTimeoutMs));
        const absl::Duration took = absl::Now() - start;
        if (group.ok()) return absl::InternalError("joined without rank 0");
        if (took > absl::Milliseconds(kTimeoutMs) + absl::Seconds(15)) {
          return absl::InternalError(absl::StrCat("took ", absl::FormatDuration(took)));
        }
        return group.status();
      });
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDeadlineExceeded) << statuses[1];
  EXPECT_THAT(std::string(statuses[1].message()), HasSubstr("Rank 0 did not join"));
}

TEST(ProcessGroupTest, ConfigMismatchNamesRanksOnEveryRank) {
  const int port = PickFreePort();
  std::vector<absl::Status> statuses =
      RunRanks(3, absl::Seconds(60), [port](int rank) -> absl::Status {
        at::set_num_threads(1);
        VISION_ASSIGN_OR_RETURN(auto group, CreateProcessGroup(Options(rank, 3, port)));
        VISION_RETURN_IF_ERROR(CheckConfigAgreement(*group, "same-config"));
        return CheckConfigAgreement(*group, rank == 2 ? "lr=0.2" : "lr=0.1");
      });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(statuses[rank].code(), absl::StatusCode::kFailedPrecondition) << statuses[rank];
    EXPECT_THAT(std::string(statuses[rank].message()),
                AllOf(HasSubstr("rank(s) 0, 1: 'lr=0.1'"), HasSubstr("rank(s) 2: 'lr=0.2'")));
  }
}

TEST(ProcessGroupTest, SumAcrossRanksRejectsDifferentLengths) {
  const int port = PickFreePort();
  std::vector<absl::Status> statuses =
      RunRanks(2, absl::Seconds(60), [port](int rank) -> absl::Status {
        at::set_num_threads(1);
        VISION_ASSIGN_OR_RETURN(auto group, CreateProcessGroup(Options(rank, 2, port)));
        std::vector<double> values(rank == 0 ? 2 : 3, 1.0);
        return SumAcrossRanks(*group, values).status();
      });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(std::string(statuses[rank].message()), HasSubstr("between 2 and 3"));
  }
}

TEST(ProcessGroupTest, OptionsFromEnvDetectsMultiNodeJobs) {
  env::DistributedEnv env;
  env.rank = 3;
  env.world_size = 4;
  env.local_world_size = 4;
  env.master_addr = "localhost";
  env.master_port = 29555;
  ProcessGroupOptions options = OptionsFromEnv(env, "gloo", std::chrono::seconds(7));
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.world_size, 4);
  EXPECT_EQ(options.master_addr, "localhost");
  EXPECT_EQ(options.master_port, 29555);
  EXPECT_EQ(options.timeout, std::chrono::seconds(7));
  EXPECT_FALSE(options.multi_node);
  env.local_world_size = 2;  // Two nodes of two.
  EXPECT_TRUE(OptionsFromEnv(env, "gloo", std::chrono::seconds(7)).multi_node);
  env.local_world_size = 4;
  env.master_addr = "10.0.0.5";  // One node, but reached through a routable address.
  EXPECT_TRUE(OptionsFromEnv(env, "gloo", std::chrono::seconds(7)).multi_node);
}

TEST(ProcessGroupTest, RejectsBadOptions) {
  EXPECT_THAT(std::string(CreateProcessGroup(Options(2, 2, 1234)).status().message()),
              HasSubstr("rank 2 is outside [0, world_size=2)"));
  ProcessGroupOptions options = Options(0, 1, 1234);
  options.backend = "mpi";
  EXPECT_THAT(std::string(CreateProcessGroup(options).status().message()),
              HasSubstr("unknown backend 'mpi'"));
}

}  // namespace
}  // namespace vision::distributed::process_group
