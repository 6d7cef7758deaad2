#include "distributed/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace vision::distributed::launch {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// Runfiles paths, relative to the test's working directory.
constexpr char kLauncher[] = "tools/launch";
constexpr char kEnvWorker[] = "distributed/launch/env_worker";
// Bound on any single launcher run; far above what each test needs.
constexpr absl::Duration kRunTimeout = absl::Seconds(30);

std::string TestTmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// A fresh directory for one test's files.
std::string MakeTestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // Parameterized tests have '/' in their names.
  const std::string dir = absl::StrCat(
      TestTmpDir(), "/",
      absl::StrReplaceAll(absl::StrCat(info->test_suite_name(), ".", info->name()), {{"/", "_"}}));
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The launcher as a child process, its stdout and stderr going to files.
class LauncherProcess {
 public:
  // `env` entries are added to (or, with an empty value, removed from) the test's environment.
  LauncherProcess(const std::vector<std::string>& args, std::map<std::string, std::string> env)
      : dir_(MakeTestDir()) {
    env.emplace("OMP_NUM_THREADS", "");  // Unless a test sets it, the launcher decides.
    std::vector<std::string> env_entries;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string name(*entry, std::strchr(*entry, '=') - *entry);
      if (env.count(name) == 0) env_entries.emplace_back(*entry);
    }
    for (const auto& [name, value] : env) {
      if (!value.empty()) env_entries.push_back(absl::StrCat(name, "=", value));
    }
    std::vector<std::string> argv_strings = {kLauncher};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_strings) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& entry : env_entries) envp.push_back(entry.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path().c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path().c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int error = posix_spawn(&pid_, kLauncher, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(error, 0) << "cannot start " << kLauncher << ": " << std::strerror(error);
  }

  ~LauncherProcess() {
    if (pid_ > 0 && !status_.has_value()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }

  // The launcher's wait status; fails the test and kills it if it outlives `timeout`.
  int Wait(absl::Duration timeout = kRunTimeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!status_.has_value()) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
      } else if (absl::Now() > deadline) {
        ADD_FAILURE() << "launcher still running after " << timeout << "; stderr:\n" << Stderr();
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        status_ = status;
      } else {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    return *status_;
  }

  // The exit code, or -1 when the launcher died by a signal.
  int ExitCode(absl::Duration timeout = kRunTimeout) {
    const int status = Wait(timeout);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string Stdout() const { return ReadFile(out_path()); }
  std::string Stderr() const { return ReadFile(err_path()); }

 private:
  std::string out_path() const { return dir_ + "/stdout"; }
  std::string err_path() const { return dir_ + "/stderr"; }

  std::string dir_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Runs `launch flags -- /bin/sh -c script` to completion.
struct Result {
  int exit_code;
  std::string out;
  std::string err;
};

Result RunShell(std::vector<std::string> flags, const std::string& script,
                std::map<std::string, std::string> env = {}) {
  flags.insert(flags.end(), {"--", "/bin/sh", "-c", script});
  LauncherProcess launcher(flags, std::move(env));
  const int exit_code = launcher.ExitCode();
  return {exit_code, launcher.Stdout(), launcher.Stderr()};
}

bool IsAlive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  // A zombie is dead, merely not yet reaped by its new parent.
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || stat.size() < paren + 3 || stat[paren + 2] != 'Z';
}

bool WaitUntilDead(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (IsAlive(pid)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// Reads a PID a worker wrote to `path`, waiting for the file up to `timeout`.
std::optional<pid_t> WaitForPidFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int pid = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(path)), &pid)) return pid;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return std::nullopt;
}

TEST(ValidateLaunchOptionsTest, RejectsBadFlagsWithTheFlagName) {
  LaunchOptions good;
  good.command = {"train"};
  ASSERT_TRUE(ValidateLaunchOptions(good).ok());
  const std::vector<std::pair<std::function<void(LaunchOptions&)>, std::string>> cases = {
      {[](LaunchOptions& o) { o.nproc_per_node = 0; }, "--nproc_per_node=0"},
      {[](LaunchOptions& o) { o.nnodes = 0; }, "--nnodes=0"},
      {[](LaunchOptions& o) { o.node_rank = 1; }, "--node_rank=1 must be in 0..0"},
      {[](LaunchOptions& o) { o.master_addr = ""; }, "--master_addr"},
      {[](LaunchOptions& o) { o.master_port = 0; }, "--master_port=0"},
      {[](LaunchOptions& o) { o.max_restarts = -1; }, "--max_restarts=-1"},
      {[](LaunchOptions& o) { o.monitor_interval = absl::ZeroDuration(); },
       "--monitor_interval_ms"},
      {[](LaunchOptions& o) { o.command.clear(); }, "after '--'"},
  };
  for (const auto& [mutate, error] : cases) {
    LaunchOptions options = good;
    mutate(options);
    const absl::Status status = ValidateLaunchOptions(options);
    EXPECT_THAT(std::string(status.message()), HasSubstr(error));
  }
}

TEST(WorkerEnvironmentTest, SetsTheContractOverInheritedValues) {
  LaunchOptions options;
  options.nproc_per_node = 2;
  options.nnodes = 3;
  options.node_rank = 2;
  options.master_addr = "host0";
  options.master_port = 1234;
  options.max_restarts = 4;
  const std::vector<std::string> env =
      WorkerEnvironment(options, 1, 3, {"PATH=/bin", "RANK=99", "RANKING=kept"});
  EXPECT_THAT(env, UnorderedElementsAre("PATH=/bin", "RANKING=kept", "RANK=5", "WORLD_SIZE=6",
                                        "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=2",
                                        "GROUP_WORLD_SIZE=3", "NODE_RANK=2", "MASTER_ADDR=host0",
                                        "MASTER_PORT=1234", "TORCHELASTIC_RESTART_COUNT=3",
                                        "TORCHELASTIC_MAX_RESTARTS=4", "OMP_NUM_THREADS=1"));
  EXPECT_THAT(WorkerEnvironment(options, 0, 0, {"OMP_NUM_THREADS=4"}),
              AllOf(Contains("OMP_NUM_THREADS=4"), Not(Contains("OMP_NUM_THREADS=1"))));
  options.nproc_per_node = 1;  // One process per node does not oversubscribe the cores.
  for (const std::string& entry : WorkerEnvironment(options, 0, 0, {})) {
    EXPECT_FALSE(absl::StartsWith(entry, "OMP_NUM_THREADS=")) << entry;
  }
}

TEST(LauncherTest, EveryWorkerSeesItsEnvironment) {
  const Result result =
      RunShell({"--nproc_per_node=3", "--nnodes=2", "--node_rank=1", "--master_addr=10.1.2.3",
                "--master_port=12345"},
               "echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK "
               "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR "
               "MASTER_PORT=$MASTER_PORT RESTART=$TORCHELASTIC_RESTART_COUNT OMP=$OMP_NUM_THREADS");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  const std::string common =
      "LOCAL_WORLD_SIZE=3 GROUP_RANK=1 MASTER_ADDR=10.1.2.3 MASTER_PORT=12345 RESTART=0 OMP=1";
  EXPECT_THAT(
      Lines(result.out),
      UnorderedElementsAre(absl::StrCat("[rank 3]: RANK=3 WORLD_SIZE=6 LOCAL_RANK=0 ", common),
                           absl::StrCat("[rank 4]: RANK=4 WORLD_SIZE=6 LOCAL_RANK=1 ", common),
                           absl::StrCat("[rank 5]: RANK=5 WORLD_SIZE=6 LOCAL_RANK=2 ", common)));
}

TEST(LauncherTest, KeepsAnExplicitOmpNumThreads) {
  const Result result =
      RunShell({"--nproc_per_node=2"}, "echo OMP=$OMP_NUM_THREADS", {{"OMP_NUM_THREADS", "7"}});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(Lines(result.out), UnorderedElementsAre("[rank 0]: OMP=7", "[rank 1]: OMP=7"));
}

TEST(LauncherTest, EnvReaderAgreesWithTheLauncher) {
  LauncherProcess launcher({"--nproc_per_node=2", "--master_port=23456", "--", kEnvWorker}, {});
  EXPECT_EQ(launcher.ExitCode(), 0) << launcher.Stderr();
  const std::string common =
      "local_world_size=2 group_rank=0 node_rank=0 "
      "master=127.0.0.1:23456 restart_count=0";
  EXPECT_THAT(
      Lines(launcher.Stdout()),
      UnorderedElementsAre(
          absl::StrCat("[rank 0]: source=torchrun rank=0 world_size=2 local_rank=0 ", common),
          absl::StrCat("[rank 1]: source=torchrun rank=1 world_size=2 local_rank=1 ", common)));
}

// Workers write each line in two pieces, on stdout and stderr, as fast as they can, and end
// stdout with a line that has no newline: every relayed line must be whole, in order per
// rank, with its own rank's prefix.
TEST(LauncherTest, RelaysWholeLinesWithRankPrefix) {
  constexpr int kWorkers = 4;
  constexpr int kLinesPerWorker = 500;
  const std::string payload(60, 'a');
  const Result result =
      RunShell({absl::StrCat("--nproc_per_node=", kWorkers)},
               absl::StrCat("i=0; while [ $i -lt ", kLinesPerWorker, " ]; do ",
                            "printf 'out%s line%s ' $RANK $i; printf '", payload, "\\n'; ",
                            "printf 'err%s line%s ' $RANK $i >&2; printf '", payload, "\\n' >&2; ",
                            "i=$((i+1)); done; printf 'last%s' $RANK"));
  ASSERT_EQ(result.exit_code, 0) << result.err;

  for (const auto& [stream, text] :
       std::vector<std::pair<std::string, std::string>>{{"out", result.out}, {"err", result.err}}) {
    const std::regex line_pattern("\\[rank (\\d)\\]: " + stream + "(\\d) line(\\d+) " + payload);
    const std::regex last_pattern("\\[rank (\\d)\\]: last(\\d)");
    std::vector<int> next_line(kWorkers, 0);
    std::vector<int> last_seen(kWorkers, 0);
    for (const std::string& line : Lines(text)) {
      if (absl::StartsWith(line, "launch: ")) continue;
      std::smatch match;
      if (std::regex_match(line, match, line_pattern)) {
        const int rank = std::stoi(match[1]);
        ASSERT_EQ(match[2], match[1]) << line;
        ASSERT_EQ(std::stoi(match[3]), next_line[rank]) << line;
        ++next_line[rank];
      } else if (stream == "out" && std::regex_match(line, match, last_pattern)) {
        ASSERT_EQ(match[2], match[1]) << line;
        ++last_seen[std::stoi(match[1])];
      } else {
        FAIL() << "malformed " << stream << " line: '" << line << "'";
      }
    }
    for (int rank = 0; rank < kWorkers; ++rank) {
      EXPECT_EQ(next_line[rank], kLinesPerWorker) << stream << " of rank " << rank;
      EXPECT_EQ(last_seen[rank], stream == "out" ? 1 : 0) << stream << " of rank " << rank;
    }
  }
}

TEST(LauncherTest, ExitCodeOfAFailedWorkerIsReported) {
  const Result result = RunShell(
      {"--nproc_per_node=2"}, "if [ $RANK = 1 ]; then echo failing >&2; exit 3; fi; exec sleep 60");
  EXPECT_EQ(result.exit_code, kWorkerFailureExitCode);
  EXPECT_THAT(result.err,
              AllOf(HasSubstr("[rank 1]: failing\n"), HasSubstr("rank 1 (local_rank 1, pid "),
                    HasSubstr("exited with code 3"),
                    HasSubstr("no restarts are left (--max_restarts=0, "
                              "restarts used: 0)"),
                    // Rank 0 was stopped by the launcher, not a failure.
                    Not(HasSubstr("rank 0 (local_rank 0"))));
}

TEST(LauncherTest, SignalThatKilledAWorkerIsReported) {
  const Result result =
      RunShell({"--nproc_per_node=2"}, "if [ $RANK = 0 ]; then kill -KILL $$; fi; exec sleep 60");
  EXPECT_EQ(result.exit_code, kWorkerFailureExitCode);
  EXPECT_THAT(result.err, AllOf(HasSubstr("rank 0 (local_rank 0, pid "),
                                HasSubstr("was killed by signal 9 (SIGKILL)"),
                                Not(HasSubstr("rank 1 (local_rank 1"))));
}

TEST(LauncherTest, CommandThatCannotRunIsReported) {
  LauncherProcess launcher({"--", "/nonexistent/train"}, {});
  EXPECT_EQ(launcher.ExitCode(), kWorkerFailureExitCode);
  EXPECT_THAT(launcher.Stderr(),
              AllOf(HasSubstr("[rank 0]: launch: cannot execute '/nonexistent/train': No such "
                              "file or directory"),
                    HasSubstr("exited with code 127")));
}

TEST(LauncherTest, MissingCommandIsAUsageError) {
  LauncherProcess launcher({"--nproc_per_node=2"}, {});
  EXPECT_EQ(launcher.ExitCode(), 2);
  EXPECT_THAT(launcher.Stderr(), HasSubstr("No training command: put it after '--'"));
}

struct StopCase {
  std::string name;
  int signal;
  // Workers' scripts; "$PIDDIR/pid.$RANK" and "$PIDDIR/child.$RANK" must name the worker
  // and a process it started.
  std::string script;
};

void PrintTo(const StopCase& stop_case, std::ostream* os) { *os << stop_case.name; }

class LauncherStopTest : public ::testing::TestWithParam<StopCase> {};

// The launcher forwards the signal, kills what does not exit within the grace period, and
// leaves no worker or worker child behind.
TEST_P(LauncherStopTest, SignalStopsAllWorkersAndTheirChildren) {
  constexpr int kWorkers = 2;
  const std::string dir = MakeTestDir();
  LauncherProcess launcher({absl::StrCat("--nproc_per_node=", kWorkers), "--grace_period_ms=500",
                            "--", "/bin/sh", "-c", GetParam().script},
                           {{"PIDDIR", dir}});
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kWorkers; ++rank) {
    for (const char* kind : {"pid", "child"}) {
      const std::optional<pid_t> pid =
          WaitForPidFile(absl::StrCat(dir, "/", kind, ".", rank), absl::Seconds(10));
      ASSERT_TRUE(pid.has_value()) << kind << " of rank " << rank << "; stderr:\n"
                                   << launcher.Stderr();
      pids.push_back(*pid);
    }
  }
  ASSERT_EQ(::kill(launcher.pid(), GetParam().signal), 0);
  EXPECT_EQ(launcher.ExitCode(absl::Seconds(10)), 128 + GetParam().signal) << launcher.Stderr();
  for (pid_t pid : pids) {
    EXPECT_TRUE(WaitUntilDead(pid, absl::Seconds(5))) << "process " << pid << " survived";
  }
}

// Writes the PID files atomically (tmp + mv) so the test never reads half a number.
constexpr char kWritePids[] =
    "echo $! > \"$PIDDIR/tmp.$RANK\" && mv \"$PIDDIR/tmp.$RANK\" \"$PIDDIR/child.$RANK\"; "
    "echo $$ > \"$PIDDIR/tmp.$RANK\" && mv \"$PIDDIR/tmp.$RANK\" \"$PIDDIR/pid.$RANK\"; ";

INSTANTIATE_TEST_SUITE_P(
    Signals, LauncherStopTest,
    ::testing::Values(
        // The shell and its child both die of SIGTERM.
        StopCase{"SigtermReachesChildren", SIGTERM,
                 absl::StrCat("sleep 1000 & ", kWritePids, "wait")},
        // A non-interactive shell starts background jobs with SIGINT ignored, so the child
        // survives the forwarded SIGINT and needs the SIGKILL after the grace period.
        StopCase{"SigintThenKillForChildrenIgnoringIt", SIGINT,
                 absl::StrCat("sleep 1000 & ", kWritePids, "wait")},
        // A worker that ignores SIGTERM, with a child that inherits that.
        StopCase{
            "SigtermIgnoredThenKill", SIGTERM,
            absl::StrCat("trap '' TERM; sleep 1000 & ", kWritePids, "while :; do wait; done")}),
    [](const ::testing::TestParamInfo<StopCase>& info) { return info.param.name; });

constexpr char kFailFirstAttempt[] =
    "if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then exit 5; fi; "
    "echo done restart=$TORCHELASTIC_RESTART_COUNT";

TEST(LauncherRestartTest, RestartRecoversFromAFailure) {
  const Result result = RunShell({"--nproc_per_node=2", "--max_restarts=1"}, kFailFirstAttempt);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, AllOf(HasSubstr("[rank 0]: done restart=1\n"),
                                HasSubstr("[rank 1]: done restart=1\n"),
                                Not(HasSubstr("[rank 1]: done restart=0"))));
  EXPECT_THAT(result.err,
              AllOf(HasSubstr("rank 1 (local_rank 1, pid "), HasSubstr("exited with code 5"),
                    HasSubstr("restart 1 of 1, TORCHELASTIC_RESTART_COUNT=1")));
}

TEST(LauncherRestartTest, WithoutRestartsTheFailureIsFinal) {
  const Result result = RunShell({"--nproc_per_node=2", "--max_restarts=0"}, kFailFirstAttempt);
  EXPECT_EQ(result.exit_code, kWorkerFailureExitCode);
  EXPECT_THAT(result.out, Not(HasSubstr("restart=1")));
  EXPECT_THAT(result.err, AllOf(HasSubstr("exited with code 5"), HasSubstr("restarts used: 0")));
}

TEST(LauncherRestartTest, SummaryListsTheFailureOfEveryAttempt) {
  const Result result =
      RunShell({"--nproc_per_node=2", "--max_restarts=2"}, "[ $RANK = 1 ] && exit 4; exit 0");
  EXPECT_EQ(result.exit_code, kWorkerFailureExitCode);
  EXPECT_THAT(result.err, HasSubstr("restarts used: 2"));
  std::vector<std::string> summary;
  for (const std::string& line : Lines(result.err)) {
    if (absl::StartsWith(line, "launch:   attempt")) summary.push_back(line);
  }
  const std::regex pattern(
      "launch:   attempt with TORCHELASTIC_RESTART_COUNT=(\\d): rank 1 \\(local_rank 1, pid "
      "\\d+\\) exited with code 4");
  ASSERT_EQ(summary.size(), 3u) << result.err;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(summary[attempt], match, pattern)) << summary[attempt];
    EXPECT_EQ(std::stoi(match[1]), attempt);
  }
  EXPECT_THAT(result.out, IsEmpty());
}

}  // namespace
}  // namespace vision::distributed::launch
