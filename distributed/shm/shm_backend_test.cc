// The "shm" backend against Gloo and against sums computed by hand in the same fixed order.
#include "distributed/shm/shm_backend.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dirent.h>

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "distributed/process_group/multiprocess_testing.h"
#include "distributed/process_group/process_group.h"
#include "distributed/shm/segment_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::distributed::shm {
namespace {

using process_group::RunRanks;
using ::testing::HasSubstr;

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> Group(
    const std::string& backend, int rank, int world, int port, int local_world_size = 0,
    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  process_group::ProcessGroupOptions options;
  options.rank = rank;
  options.world_size = world;
  options.master_port = port;
  options.backend = backend;
  options.local_world_size = local_world_size;
  options.timeout = timeout;
  return process_group::CreateProcessGroup(options);
}

// Rank r's input: identical in every process, so each rank can compute the expected sum.
at::Tensor Input(int rank, int64_t numel, at::ScalarType type) {
  at::manual_seed(100 + rank);
  return at::randn({numel}, at::kDouble).to(type);
}

// Segment files of the job on `port` still named in /dev/shm.
std::vector<std::string> SegmentFiles(int port) {
  std::vector<std::string> found;
  const std::string prefix = JobSegmentPrefix(port);
  if (DIR* dir = opendir(kShmDirectory)) {
    while (const dirent* entry = readdir(dir)) {
      if (std::string(entry->d_name).rfind(prefix, 0) == 0) found.push_back(entry->d_name);
    }
    closedir(dir);
  }
  return found;
}

absl::Status ExpectEqual(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  if (got.scalar_type() == want.scalar_type() && at::equal(got, want)) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": not bit-identical, max difference ",
                   (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>()));
}

// Sizes around the 1 MiB chunk of two ranks and the 64-byte share alignment.
const std::vector<int64_t> kSizes = {1, 17, 1000, (int64_t{1} << 20) / 4 + 3, 3'000'001};

c10d::AllreduceOptions Average() {
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::AVG;
  return options;
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

TEST(ShmBackendTest, TwoRanksAreBitIdenticalToGloo) {
  const int gloo_port = process_group::PickFreePort();
  const int shm_port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(2, absl::Seconds(60), [&](int rank) -> absl::Status {
    at::set_num_threads(1);
    VISION_ASSIGN_OR_RETURN(auto gloo, Group("gloo", rank, 2, gloo_port));
    VISION_ASSIGN_OR_RETURN(auto shm, Group("shm", rank, 2, shm_port));
    if (!SegmentFiles(shm_port).empty()) {
      return absl::InternalError(
          absl::StrCat("segment still named in /dev/shm: ", SegmentFiles(shm_port)[0]));
    }
    for (at::ScalarType type : {at::kFloat, at::kDouble, at::kHalf}) {
      for (int64_t numel : kSizes) {
        std::vector<at::Tensor> a = {Input(rank, numel, type)};
        std::vector<at::Tensor> b = {a[0].clone()};
        gloo->allreduce(a)->wait();
        shm->allreduce(b)->wait();
        VISION_RETURN_IF_ERROR(
            ExpectEqual(b[0], a[0], absl::StrCat(c10::toString(type), " x ", numel)));
      }
    }
    // AVG, which Gloo lacks: the same as Gloo's sum divided by the world size.
    for (at::ScalarType type : {at::kFloat, at::kDouble}) {
      for (int64_t numel : kSizes) {
        std::vector<at::Tensor> a = {Input(rank, numel, type)};
        std::vector<at::Tensor> b = {a[0].clone()};
        gloo->allreduce(a)->wait();
        a[0].div_(2);
        shm->allreduce(b, Average())->wait();
        VISION_RETURN_IF_ERROR(ExpectEqual(
            b[0], a[0], absl::StrCat("average of ", c10::toString(type), " x ", numel)));
      }
    }
    // Gloo cannot sum bfloat16; the sum in float rounded once is the reference.
    std::vector<at::Tensor> b = {Input(rank, 1001, at::kBFloat16)};
    shm->allreduce(b)->wait();
    const at::Tensor want = (Input(0, 1001, at::kBFloat16).to(at::kFloat) +
                             Input(1, 1001, at::kBFloat16).to(at::kFloat))
                                .to(at::kBFloat16);
    return ExpectEqual(b[0], want, "bfloat16");
  }));
}

// Four ranks on one node, and the same four as two nodes of two (the cross-node step through
// Gloo, each local rank with its peer on the other node): exact fixed-order sums.
class ShmLayoutTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmLayoutTest, FourRanksSumInFixedOrder) {
  const int local_world_size = GetParam();
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(4, absl::Seconds(90), [&](int rank) -> absl::Status {
    at::set_num_threads(1);
    VISION_ASSIGN_OR_RETURN(auto group, Group("shm", rank, 4, port, local_world_size));
    for (at::ScalarType type : {at::kFloat, at::kHalf, at::kBFloat16}) {
      for (int64_t numel : {int64_t{5}, int64_t{1000}, int64_t{1'500'001}}) {
        std::vector<at::Tensor> got = {Input(rank, numel, type)};
        // Issue two before waiting, as overlapping buckets do.
        std::vector<at::Tensor> again = {Input(rank, numel, type)};
        auto first = group->allreduce(got);
        auto second = group->allreduce(again);
        first->wait();
        second->wait();
        std::vector<at::Tensor> in;
        for (int r = 0; r < 4; ++r) in.push_back(Input(r, numel, type).to(at::kFloat));
        at::Tensor want;
        if (local_world_size == 4) {
          want = ((in[0] + in[1]) + in[2]) + in[3];
        } else {
          // Node sums rounded to the type only for float (half and bfloat16 stay in float).
          want = (in[0] + in[1]) + (in[2] + in[3]);
        }
        const std::string what = absl::StrCat(c10::toString(type), " x ", numel);
        VISION_RETURN_IF_ERROR(ExpectEqual(got[0], want.to(type), what));
        VISION_RETURN_IF_ERROR(ExpectEqual(again[0], want.to(type), what + " (second in flight)"));
        // AVG: the same sum divided by 4 before rounding to the type.
        std::vector<at::Tensor> average = {Input(rank, numel, type)};
        group->allreduce(average, Average())->wait();
        VISION_RETURN_IF_ERROR(ExpectEqual(average[0], (want / 4).to(type), "average of " + what));
      }
    }
    return absl::OkStatus();
  }));
}

INSTANTIATE_TEST_SUITE_P(OneAndTwoNodes, ShmLayoutTest, ::testing::Values(4, 2),
                         [](const auto& info) {
                           return info.param == 4 ? std::string("OneNode")
                                                  : std::string("TwoNodesOfTwo");
                         });

// One rank per node: no segment, the sum goes through Gloo and the backend divides it.
TEST(ShmBackendTest, OneRankPerNodeAveragesOverGloo) {
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(2, absl::Seconds(60), [&](int rank) -> absl::Status {
    at::set_num_threads(1);
    VISION_ASSIGN_OR_RETURN(auto group, Group("shm", rank, 2, port, /*local_world_size=*/1));
    for (at::ScalarType type : {at::kFloat, at::kHalf}) {
      std::vector<at::Tensor> got = {Input(rank, 1001, type)};
      group->allreduce(got, Average())->wait();
      const at::Tensor want =
          ((Input(0, 1001, type).to(at::kFloat) + Input(1, 1001, type).to(at::kFloat)) / 2)
              .to(type);
      VISION_RETURN_IF_ERROR(ExpectEqual(got[0], want, c10::toString(type)));
    }
    return absl::OkStatus();
  }));
}

TEST(ShmBackendTest, OtherCollectivesGoThroughGloo) {
  const int port = process_group::PickFreePort();
  ExpectAllOk(RunRanks(2, absl::Seconds(60), [&](int rank) -> absl::Status {
    VISION_ASSIGN_OR_RETURN(auto group, Group("shm", rank, 2, port));
    std::vector<at::Tensor> longs = {at::full({3}, rank + 1, at::kLong)};
    group->allreduce(longs)->wait();
    std::vector<at::Tensor> maxed = {at::full({2}, static_cast<double>(rank), at::kFloat)};
    c10d::AllreduceOptions max_options;
    max_options.reduceOp = c10d::ReduceOp::MAX;
    group->allreduce(maxed, max_options)->wait();
    std::vector<at::Tensor> root = {at::full({2}, static_cast<double>(rank + 5), at::kFloat)};
    group->broadcast(root)->wait();
    group->barrier()->wait();
    if (longs[0][0].item<int64_t>() != 3 || maxed[0][1].item<float>() != 1.0f ||
        root[0][0].item<float>() != 5.0f) {
      return absl::InternalError("a delegated collective gave a wrong result");
    }
    return absl::OkStatus();
  }));
}

TEST(ShmBackendTest, PeerThatExitedIsNamedWithoutWaitingForTheTimeout) {
  const int port = process_group::PickFreePort();
  const std::vector<absl::Status> statuses =
      RunRanks(2, absl::Seconds(25), [&](int rank) -> absl::Status {
        VISION_ASSIGN_OR_RETURN(auto group, Group("shm", rank, 2, port));
        // Rank 1 leaves (its process exits) without joining the all-reduce.
        if (rank == 1) return absl::OkStatus();
        std::vector<at::Tensor> t = {at::ones({1000})};
        try {
          group->allreduce(t)->wait();
        } catch (const std::exception& e) {
          return absl::UnavailableError(e.what());
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kUnavailable) << statuses[0];
  EXPECT_THAT(std::string(statuses[0].message()),
              HasSubstr("local rank 1 (rank 1) exited in the middle of a collective"));
}

TEST(ShmBackendTest, StalledPeerIsNamedAfterTheTimeout) {
  const int port = process_group::PickFreePort();
  const std::vector<absl::Status> statuses =
      RunRanks(2, absl::Seconds(25), [&](int rank) -> absl::Status {
        VISION_ASSIGN_OR_RETURN(auto group,
                                Group("shm", rank, 2, port, 0, std::chrono::seconds(2)));
        // Rank 1 stays alive but does not join the all-reduce in time.
        if (rank == 1) {
          absl::SleepFor(absl::Seconds(5));
          return absl::OkStatus();
        }
        std::vector<at::Tensor> t = {at::ones({1000})};
        try {
          group->allreduce(t)->wait();
        } catch (const std::exception& e) {
          return absl::DeadlineExceededError(e.what());
        }
        return absl::OkStatus();
      });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded) << statuses[0];
  EXPECT_THAT(std::string(statuses[0].message()),
              HasSubstr("local rank 1 (rank 1) did not arrive within 2000 ms"));
}

TEST(ShmBackendTest, TooSmallSharedMemoryFailsClearly) {
  const int port = process_group::PickFreePort();
  const std::vector<absl::Status> statuses =
      RunRanks(2, absl::Seconds(30), [&](int rank) -> absl::Status {
        c10d::TCPStoreOptions store_options;
        store_options.port = static_cast<uint16_t>(port);
        store_options.isServer = rank == 0;
        store_options.waitWorkers = false;
        store_options.timeout = std::chrono::seconds(10);
        auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
        ShmBackendOptions options;
        options.rank = rank;
        options.world_size = 2;
        options.master_port = port;
        options.timeout = std::chrono::seconds(3);
        options.slot_bytes = int64_t{1} << 42;  // 8 TiB: more than any /dev/shm.
        absl::Status status = CreateShmBackend(store, options, {}, {}).status();
        // Rank 0 hosts the store: let rank 1 see its own error first.
        if (rank == 0) absl::SleepFor(absl::Seconds(5));
        return status;
      });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kResourceExhausted) << statuses[0];
  EXPECT_THAT(std::string(statuses[0].message()),
              HasSubstr("shared memory too small: need 25165825 MB in /dev/shm, have "));
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("or use backend GLOO"));
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDeadlineExceeded) << statuses[1];
  EXPECT_THAT(std::string(statuses[1].message()),
              HasSubstr("local rank 0 of node 0 did not create the shared-memory segment"));
  EXPECT_TRUE(SegmentFiles(port).empty());
}

}  // namespace
}  // namespace vision::distributed::shm
