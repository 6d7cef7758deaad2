// End-to-end data-parallel training through the launcher, as a user runs it: processes,
// rendezvous, gradient strategies, distributed evaluation, checkpoints and restarts.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const char kLaunch[] = "tools/launch";
const char kTrain[] = "engine/testing/train_for_tests";

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(root ? root : "/tmp") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Per-rank batch `batch`, 8 optimizer steps of the test regressor, evaluated at the end.
std::string WriteConfig(const std::string& dir, int batch, const std::string& strategy) {
  const std::string path = dir + "/config.pbtxt";
  std::ofstream(path) << absl::StrCat(R"pb(
    model { type: "TestRegressor" }
    train_data {
      dataset { type: "TestImages" }
      loader { batch_size: )pb", batch, R"pb( num_workers: 1 }
    }
    eval_data {
      dataset { type: "TestImages" options { [type.googleapis.com/vision.engine.testing.TestImagesOptions] { size: 13 } } }
      loader { batch_size: 2 num_workers: 1 }
    }
    evaluation { evaluator { type: "TestShareError" } }
    optimizer { type: "SGD" lr: 0.05 }
    train { max_steps: 8 intra_op_threads: 1 }
    distributed { strategy { type: ")pb", strategy, R"pb(" } timeout_seconds: 30 }
    logging { every_n_steps: 4 tensorboard: false }
    seed: 5
    checkpoint { every_n_steps: 4 keep_last: 5 output_dir: ")pb", dir, "/run\" }\n");
  return path;
}

struct Outcome {
  int exit_code;
  std::string output;
};

Outcome RunCommand(const std::string& command) {
  Outcome outcome{-1, ""};
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (pipe != nullptr && std::fgets(buffer, sizeof(buffer), pipe) != nullptr) outcome.output += buffer;
  const int status = pipe != nullptr ? ::pclose(pipe) : -1;
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

std::string Launch(int processes, const std::string& config, const std::string& extra = "") {
  return absl::StrCat(kLaunch, " --nproc_per_node=", processes, " --master_port=0 ", extra,
                      " -- ", kTrain, " --config=", config);
}

std::vector<at::Tensor> FinalParameters(const std::string& dir) {
  torch::serialize::InputArchive archive, model;
  archive.load_from(dir + "/run/checkpoint_8.pt");
  archive.read("model", model);
  std::vector<at::Tensor> params;
  for (const char* layer : {"conv1", "conv2"}) {
    torch::serialize::InputArchive module;  // Module::save nests submodules
    model.read(layer, module);
    for (const char* name : {"weight", "bias"}) {
      at::Tensor t;
      module.read(name, t);
      params.push_back(t);
    }
  }
  return params;
}

double MaxRelativeDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, ((a[i] - b[i]).norm() / b[i].norm()).item<double>());
  }
  return worst;
}

TEST(DistributedTrainingTest, TwoRanksMatchOneRankOnTheFullBatch) {
  const std::string one = TempDir("one"), two = TempDir("two");
  Outcome single = RunCommand(Launch(1, WriteConfig(one, 4, "bucketed")));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  Outcome pair = RunCommand(Launch(2, WriteConfig(two, 2, "bucketed")));
  ASSERT_EQ(pair.exit_code, 0) << pair.output;
  EXPECT_THAT(pair.output, HasSubstr("[rank 0]: step 8/8"));
  EXPECT_LT(MaxRelativeDifference(FinalParameters(two), FinalParameters(one)), 1e-5);
  // Distributed evaluation counts each of the 13 eval images exactly once.
  EXPECT_THAT(pair.output, HasSubstr("count 13.0000"));
  EXPECT_THAT(single.output, HasSubstr("count 13.0000"));
}

TEST(DistributedTrainingTest, KilledWorkerIsRestartedAndTheRunResumesExactly) {
  const std::string clean = TempDir("clean"), faulty = TempDir("faulty");
  Outcome reference = RunCommand(Launch(2, WriteConfig(clean, 2, "allreduce")));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  // Rank 1 dies in its 6th step (after the step-4 checkpoint); the group restarts and resumes.
  Outcome recovered = RunCommand("VISION_TEST_KILL_RANK=1 VISION_TEST_KILL_AT_CALL=6 " +
                          Launch(2, WriteConfig(faulty, 2, "allreduce"), "--max_restarts=1"));
  ASSERT_EQ(recovered.exit_code, 0) << recovered.output;
  EXPECT_THAT(recovered.output, HasSubstr("SIGKILL"));
  EXPECT_THAT(recovered.output, HasSubstr("resumed from step 4"));
  // Bitwise: the resumed run repeats exactly what the uninterrupted one computed.
  EXPECT_EQ(MaxRelativeDifference(FinalParameters(faulty), FinalParameters(clean)), 0.0);
}

TEST(DistributedTrainingTest, WithoutRestartsAKilledWorkerFailsTheJobNamingIt) {
  const std::string dir = TempDir("no_restart");
  Outcome failed = RunCommand("VISION_TEST_KILL_RANK=1 VISION_TEST_KILL_AT_CALL=2 " +
                       Launch(2, WriteConfig(dir, 2, "bucketed")));
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_THAT(failed.output, HasSubstr("rank 1"));
  EXPECT_THAT(failed.output, HasSubstr("SIGKILL"));
}

// Two "nodes" on one machine: two network namespaces joined by a veth pair, one launcher in
// each (--nnodes=2), the store on the first node's address. Needs root (CI runs as root).
class TwoNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    suffix_ = std::to_string(::getpid() % 100000);
    ns0_ = "vt0-" + suffix_;
    ns1_ = "vt1-" + suffix_;
    if (::geteuid() != 0 || RunCommand("ip netns add " + ns0_).exit_code != 0) {
      GTEST_SKIP() << "two-node test skipped: creating network namespaces needs root and "
                      "iproute2 (CI runs it as root)";
    }
    created_ = true;
    const std::string a = "va" + suffix_, b = "vb" + suffix_;
    for (const std::string& command :
         {"ip netns add " + ns1_, "ip link add " + a + " type veth peer name " + b,
          "ip link set " + a + " netns " + ns0_, "ip link set " + b + " netns " + ns1_,
          "ip -n " + ns0_ + " addr add 10.231.0.1/24 dev " + a,
          "ip -n " + ns1_ + " addr add 10.231.0.2/24 dev " + b,
          "ip -n " + ns0_ + " link set " + a + " up", "ip -n " + ns1_ + " link set " + b + " up",
          "ip -n " + ns0_ + " link set lo up", "ip -n " + ns1_ + " link set lo up"}) {
      Outcome outcome = RunCommand(command);
      ASSERT_EQ(outcome.exit_code, 0) << command << ": " << outcome.output;
    }
  }
  void TearDown() override {
    if (!created_) return;
    RunCommand("ip netns del " + ns0_);  // removes the veth pair with it
    RunCommand("ip netns del " + ns1_);
  }
  std::string Node(int node_rank, const std::string& config) const {
    const std::string ns = node_rank == 0 ? ns0_ : ns1_;
    const std::string interface = (node_rank == 0 ? "va" : "vb") + suffix_;
    return absl::StrCat("ip netns exec ", ns, " env GLOO_SOCKET_IFNAME=", interface, " ",
                        kLaunch, " --nnodes=2 --node_rank=", node_rank,
                        " --nproc_per_node=1 --master_addr=10.231.0.1 --master_port=29611 -- ",
                        kTrain, " --config=", config);
  }
  std::string suffix_, ns0_, ns1_;
  bool created_ = false;
};

TEST_F(TwoNodes, TrainingAcrossTwoNodesMatchesOneProcess) {
  const std::string one = TempDir("node_reference"), two = TempDir("nodes");
  Outcome single = RunCommand(Launch(1, WriteConfig(one, 4, "bucketed")));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const std::string config = WriteConfig(two, 2, "bucketed");
  FILE* node1 = ::popen((Node(1, config) + " > " + two + "/node1.log 2>&1").c_str(), "r");
  ASSERT_NE(node1, nullptr);
  Outcome node0 = RunCommand(Node(0, config));
  const int node1_status = ::pclose(node1);
  std::string node1_log;
  {
    std::ifstream in(two + "/node1.log");
    node1_log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_EQ(node0.exit_code, 0) << node0.output;
  ASSERT_TRUE(WIFEXITED(node1_status) && WEXITSTATUS(node1_status) == 0) << node1_log;
  EXPECT_THAT(node1_log, HasSubstr("starting ranks 1..1 of 2 (master 10.231.0.1:29611"));
  EXPECT_THAT(node0.output, HasSubstr("[rank 0]: step 8/8"));
  EXPECT_LT(MaxRelativeDifference(FinalParameters(two), FinalParameters(one)), 1e-5);
}

TEST(DistributedTrainingTest, RanksWithDifferentConfigsAreRefused) {
  const std::string dir = TempDir("mismatch");
  const std::string config = WriteConfig(dir, 2, "bucketed");
  Outcome failed = RunCommand(absl::StrCat(kLaunch, " --nproc_per_node=2 --master_port=0 -- /bin/sh -c '",
                                    "exec ", kTrain, " --config=", config,
                                    " --override=\"seed: $RANK\"'"));
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_THAT(failed.output, HasSubstr("ranks disagree on the config"));
}

}  // namespace
}  // namespace vision::engine::testing
