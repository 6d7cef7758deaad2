#include "distributed/env/distributed_env.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::distributed::env {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A getenv over a fixed map, so no test depends on the machine's environment.
class FakeEnv {
 public:
  explicit FakeEnv(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}

  std::function<const char*(const char*)> getenv() const {
    return [this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }

 private:
  std::map<std::string, std::string> vars_;
};

absl::StatusOr<DistributedEnv> Read(std::map<std::string, std::string> vars) {
  FakeEnv env(std::move(vars));
  return ReadDistributedEnv(env.getenv());
}

std::string ErrorOf(std::map<std::string, std::string> vars) {
  absl::StatusOr<DistributedEnv> env = Read(std::move(vars));
  EXPECT_FALSE(env.ok());
  return env.ok() ? "" : std::string(env.status().message());
}

TEST(ReadDistributedEnvTest, NoLauncherIsOneProcess) {
  absl::StatusOr<DistributedEnv> env = Read({{"HOME", "/root"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSource::kSingleProcess);
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 1);
  EXPECT_EQ(env->group_rank, 0);
  EXPECT_FALSE(env->node_rank.has_value());
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, kDefaultMasterPort);
  EXPECT_EQ(env->restart_count, 0);
  EXPECT_FALSE(env->is_distributed());
}

TEST(ReadDistributedEnvTest, SingleProcessHonoursExplicitStore) {
  absl::StatusOr<DistributedEnv> env = Read({{"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "4000"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "10.1.1.1");
  EXPECT_EQ(env->master_port, 4000);
}

TEST(ReadDistributedEnvTest, TorchrunFullContract) {
  absl::StatusOr<DistributedEnv> env = Read({{"RANK", "5"},
                                             {"WORLD_SIZE", "8"},
                                             {"LOCAL_RANK", "1"},
                                             {"LOCAL_WORLD_SIZE", "4"},
                                             {"GROUP_RANK", "1"},
                                             {"NODE_RANK", "1"},
                                             {"MASTER_ADDR", "10.0.0.7"},
                                             {"MASTER_PORT", "23456"},
                                             {"TORCHELASTIC_RESTART_COUNT", "2"},
                                             // torchrun inside a Slurm allocation wins.
                                             {"SLURM_PROCID", "0"},
                                             {"SLURM_NTASKS", "2"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSource::kTorchrun);
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->node_rank, 1);
  EXPECT_EQ(env->master_addr, "10.0.0.7");
  EXPECT_EQ(env->master_port, 23456);
  EXPECT_EQ(env->restart_count, 2);
  EXPECT_TRUE(env->is_distributed());
}

TEST(ReadDistributedEnvTest, HandWrittenEnvInitIsOneNode) {
  absl::StatusOr<DistributedEnv> env =
      Read({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->group_rank, 0);
  EXPECT_FALSE(env->node_rank.has_value());
}

TEST(ReadDistributedEnvTest, TorchrunErrorsNameTheVariable) {
  EXPECT_THAT(ErrorOf({{"RANK", "abc"}, {"WORLD_SIZE", "2"}}),
              AllOf(HasSubstr("RANK='abc' is not an integer"), HasSubstr("torchrun")));
  EXPECT_THAT(ErrorOf({{"RANK", "4"}, {"WORLD_SIZE", "4"}}),
              HasSubstr("RANK=4 is outside [0, WORLD_SIZE=4)"));
  EXPECT_THAT(ErrorOf({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}),
              HasSubstr("RANK=-1 is outside [0, WORLD_SIZE=4)"));
  EXPECT_THAT(ErrorOf({{"RANK", "0"}}), HasSubstr("WORLD_SIZE is not set"));
  EXPECT_THAT(ErrorOf({{"WORLD_SIZE", "2"}}), HasSubstr("RANK is not set"));
  EXPECT_THAT(ErrorOf({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
              HasSubstr("WORLD_SIZE=0 must be at least 1"));
  EXPECT_THAT(ErrorOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}),
              AllOf(HasSubstr("MASTER_ADDR is not set but WORLD_SIZE=2"),
                    HasSubstr("--master_addr"), HasSubstr("torchrun")));
  EXPECT_THAT(ErrorOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
              HasSubstr("MASTER_PORT is not set but WORLD_SIZE=2"));
  EXPECT_THAT(
      ErrorOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
      HasSubstr("MASTER_PORT=70000 is not a TCP port"));
  EXPECT_THAT(ErrorOf({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}}),
              HasSubstr("LOCAL_RANK is not set but LOCAL_WORLD_SIZE=4 < WORLD_SIZE=8"));
  EXPECT_THAT(
      ErrorOf({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "4"}}),
      HasSubstr("LOCAL_RANK=4 is outside [0, LOCAL_WORLD_SIZE=4)"));
  EXPECT_THAT(ErrorOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}}),
              HasSubstr("LOCAL_WORLD_SIZE=3 exceeds WORLD_SIZE=2"));
  EXPECT_THAT(ErrorOf({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "x"}}),
              HasSubstr("TORCHELASTIC_RESTART_COUNT='x' is not an integer"));
}

TEST(ReadDistributedEnvTest, SlurmDerivesMasterFromNodelistAndPortFromJobId) {
  absl::StatusOr<DistributedEnv> env = Read({{"SLURM_PROCID", "5"},
                                             {"SLURM_NTASKS", "8"},
                                             {"SLURM_LOCALID", "1"},
                                             {"SLURM_NODEID", "1"},
                                             {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                             {"SLURM_JOB_NODELIST", "node[01-04,07],gpu5"},
                                             {"SLURM_NODELIST", "ignored"},
                                             {"SLURM_JOB_ID", "123456"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSource::kSlurm);
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->node_rank, 1);
  EXPECT_EQ(env->master_addr, "node01");
  EXPECT_EQ(env->master_port, 15000 + 3456);
}

TEST(ReadDistributedEnvTest, SlurmHeterogeneousNodesAndFallbacks) {
  // Node 1 of "3,2" runs two tasks; SLURM_NODELIST and SLURM_NPROCS are the older names.
  absl::StatusOr<DistributedEnv> env = Read({{"SLURM_PROCID", "4"},
                                             {"SLURM_NPROCS", "5"},
                                             {"SLURM_LOCALID", "1"},
                                             {"SLURM_NODEID", "1"},
                                             {"SLURM_TASKS_PER_NODE", "3,2"},
                                             {"SLURM_NODELIST", "gpu[7-8]"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->world_size, 5);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "gpu7");
  EXPECT_EQ(env->master_port, kDefaultMasterPort);
}

TEST(ReadDistributedEnvTest, SlurmExplicitValuesWin) {
  absl::StatusOr<DistributedEnv> env = Read({{"SLURM_PROCID", "0"},
                                             {"SLURM_NTASKS", "4"},
                                             {"SLURM_LOCALID", "0"},
                                             {"SLURM_NTASKS_PER_NODE", "2"},
                                             {"SLURM_TASKS_PER_NODE", "garbage"},
                                             {"SLURM_JOB_NODELIST", "n[1-2]"},
                                             {"SLURM_JOB_ID", "77"},
                                             {"MASTER_ADDR", "10.9.9.9"},
                                             {"MASTER_PORT", "31000"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "10.9.9.9");
  EXPECT_EQ(env->master_port, 31000);
  EXPECT_FALSE(env->node_rank.has_value());
}

TEST(ReadDistributedEnvTest, SlurmErrorsNameTheVariable) {
  const std::map<std::string, std::string> base = {
      {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},         {"SLURM_LOCALID", "1"},
      {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  ASSERT_TRUE(Read(base).ok());
  auto with = [&](const std::string& name, const std::string& value) {
    std::map<std::string, std::string> vars = base;
    vars[name] = value;
    return vars;
  };
  auto without = [&](const std::string& name) {
    std::map<std::string, std::string> vars = base;
    vars.erase(name);
    return vars;
  };
  EXPECT_THAT(ErrorOf(with("SLURM_JOB_NODELIST", "n[1-2")),
              AllOf(HasSubstr("SLURM_JOB_NODELIST='n[1-2'"), HasSubstr("unbalanced '['")));
  EXPECT_THAT(ErrorOf(without("SLURM_JOB_NODELIST")),
              HasSubstr("MASTER_ADDR is not set and neither is SLURM_JOB_NODELIST"));
  EXPECT_THAT(ErrorOf(with("SLURM_PROCID", "2")),
              HasSubstr("SLURM_PROCID=2 is outside [0, SLURM_NTASKS=2)"));
  EXPECT_THAT(ErrorOf(with("SLURM_LOCALID", "2")),
              HasSubstr("SLURM_LOCALID=2 is outside [0, tasks per node=2)"));
  EXPECT_THAT(ErrorOf(with("SLURM_NTASKS", "two")),
              AllOf(HasSubstr("SLURM_NTASKS='two' is not an integer"), HasSubstr("srun")));
  EXPECT_THAT(ErrorOf(without("SLURM_NTASKS")), HasSubstr("SLURM_NTASKS is not set"));
  EXPECT_THAT(ErrorOf(without("SLURM_LOCALID")), HasSubstr("SLURM_LOCALID is not set"));
  EXPECT_THAT(ErrorOf(without("SLURM_TASKS_PER_NODE")),
              HasSubstr("Neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set"));
  EXPECT_THAT(ErrorOf(with("SLURM_TASKS_PER_NODE", "2(x)")),
              HasSubstr("SLURM_TASKS_PER_NODE='2(x)'"));
  EXPECT_THAT(ErrorOf(with("SLURM_NODEID", "3")),
              HasSubstr("SLURM_NODEID=3 has no entry in SLURM_TASKS_PER_NODE='2'"));
  std::map<std::string, std::string> uneven = without("SLURM_NODEID");
  uneven["SLURM_TASKS_PER_NODE"] = "2,1";
  EXPECT_THAT(ErrorOf(uneven), HasSubstr("differs between nodes but SLURM_NODEID is not set"));
  EXPECT_THAT(ErrorOf(with("SLURM_JOB_ID", "12a")), HasSubstr("SLURM_JOB_ID='12a'"));
}

TEST(FirstHostOfHostlistTest, ExpandsTheFirstEntry) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"node[01-04,07],gpu5", "node01"},
      {"gpu5", "gpu5"},
      {"login1,login2", "login1"},
      {"n[007]", "n007"},
      {"n[9,3-5]", "n9"},
      {"rack[2-3]-n[5,9]", "rack2-n5"},
      {"a-b.example.com,c", "a-b.example.com"},
      {"[10-12]x", "10x"},
  };
  for (const auto& [hostlist, first] : cases) {
    absl::StatusOr<std::string> host = FirstHostOfHostlist(hostlist);
    ASSERT_TRUE(host.ok()) << hostlist << ": " << host.status();
    EXPECT_EQ(*host, first) << hostlist;
  }
}

TEST(FirstHostOfHostlistTest, RejectsMalformedLists) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {",a", "empty"},
      {"node[01-04", "unbalanced '['"},
      {"node]1", "unbalanced ']'"},
      {"node[]", "does not start with a number"},
      {"node[a-b]", "does not start with a number"},
      {"node[4-2]", "is not a range"},
      {"node[4-]", "is not a range"},
  };
  for (const auto& [hostlist, error] : cases) {
    absl::StatusOr<std::string> host = FirstHostOfHostlist(hostlist);
    ASSERT_FALSE(host.ok()) << hostlist << " -> " << *host;
    EXPECT_THAT(std::string(host.status().message()), HasSubstr(error)) << hostlist;
  }
}

TEST(ParseSlurmTasksPerNodeTest, ExpandsRepeats) {
  absl::StatusOr<std::vector<int>> counts = ParseSlurmTasksPerNode("4(x2),3,1(x1)");
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_THAT(*counts, ElementsAre(4, 4, 3, 1));
  for (const char* bad : {"", "0", "4(x0)", "4(2)", "4(x2", "x", "4,,2"}) {
    EXPECT_FALSE(ParseSlurmTasksPerNode(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace vision::distributed::env
