#include "distributed/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "distributed/shm/segment_name.h"

extern char** environ;

namespace vision::distributed::launch {
namespace {

// A line longer than this is relayed in pieces, so a worker that never prints a newline
// cannot grow the launcher's memory without bound.
constexpr size_t kMaxLineBytes = 64 * 1024;
// How long processes get to disappear after SIGKILL (only a process stuck in the kernel
// takes longer); past it the launcher reports them and moves on instead of hanging.
constexpr absl::Duration kKillWait = absl::Seconds(5);
// Slice of the stop loop: how often exits are checked while waiting for workers to stop.
constexpr absl::Duration kStopPollSlice = absl::Milliseconds(20);
// Ceiling on --nproc_per_node: each worker costs two pipes and a poll slot.
constexpr int kMaxWorkersPerNode = 1024;

// Writes all of `data`, retrying short writes. Output that cannot be written (a closed
// terminal or pipe) is dropped: the launcher must keep supervising regardless.
void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void Log(absl::string_view message) {
  WriteAll(STDERR_FILENO, absl::StrCat("launch: ", message, "\n"));
}

std::string SignalName(int signo) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
  };
  for (const auto& [number, name] : kNames) {
    if (number == signo) return name;
  }
  return absl::StrCat("signal ", signo);
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        SignalName(WTERMSIG(status)), ")",
                        WCOREDUMP(status) ? ", core dumped" : "");
  }
  return absl::StrCat("ended with wait status ", status);
}

int PollTimeoutMs(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))),
                        std::numeric_limits<int>::max()));
}

// The write end of the self-pipe through which signal handlers wake the poll loop.
int g_signal_pipe_write = -1;

void OnSignal(int signo) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  // A full pipe already holds a pending signal, so losing this byte loses nothing.
  [[maybe_unused]] const ssize_t ignored = ::write(g_signal_pipe_write, &byte, 1);
  errno = saved_errno;
}

// Catches SIGINT and SIGTERM into a self-pipe and ignores SIGPIPE (a closed stdout must not
// kill the supervisor) for its lifetime; restores the previous dispositions afterwards.
class SignalCatcher {
 public:
  static absl::StatusOr<std::unique_ptr<SignalCatcher>> Install() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return absl::InternalError(absl::StrCat("pipe2 failed: ", std::strerror(errno)));
    }
    auto catcher = std::unique_ptr<SignalCatcher>(new SignalCatcher(fds[0], fds[1]));
    g_signal_pipe_write = fds[1];
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &catcher->old_int_);
    ::sigaction(SIGTERM, &action, &catcher->old_term_);
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &catcher->old_pipe_);
    // An inherited SIG_IGN would make the kernel reap the workers before their status is read.
    struct sigaction default_action = {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    ::sigaction(SIGCHLD, &default_action, &catcher->old_chld_);
    return catcher;
  }

  ~SignalCatcher() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::sigaction(SIGCHLD, &old_chld_, nullptr);
    g_signal_pipe_write = -1;
    ::close(read_fd_);
    ::close(write_fd_);
  }

  int fd() const { return read_fd_; }

  // The signals caught since the last call, oldest first.
  std::vector<int> Take() {
    std::vector<int> signals;
    unsigned char bytes[64];
    ssize_t n;
    while ((n = ::read(read_fd_, bytes, sizeof(bytes))) > 0) {
      signals.insert(signals.end(), bytes, bytes + n);
    }
    return signals;
  }

 private:
  SignalCatcher(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}

  int read_fd_;
  int write_fd_;
  struct sigaction old_int_ = {};
  struct sigaction old_term_ = {};
  struct sigaction old_pipe_ = {};
  struct sigaction old_chld_ = {};
};

// Relays one worker stream to one launcher stream, a whole line per write, each line
// prefixed with the worker's rank, so lines of different workers never mix.
class LineRelay {
 public:
  LineRelay(int fd, int out_fd, std::string prefix)
      : fd_(fd), out_fd_(out_fd), prefix_(std::move(prefix)) {}
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;
  ~LineRelay() { Close(); }

  // -1 once the stream is closed.
  int fd() const { return fd_; }

  // Reads what is available (the fd is non-blocking) and relays the complete lines.
  void OnReadable() {
    char buffer[64 * 1024];
    const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
    if (n > 0) {
      pending_.append(buffer, static_cast<size_t>(n));
      RelayCompleteLines();
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      Close();
    }
  }

  // Relays a trailing partial line (newline added) and closes the stream.
  void Close() {
    if (fd_ < 0) return;
    if (!pending_.empty()) {
      WriteAll(out_fd_, absl::StrCat(prefix_, pending_, "\n"));
      pending_.clear();
    }
    ::close(fd_);
    fd_ = -1;
  }

 private:
  void RelayCompleteLines() {
    std::string out;
    size_t start = 0;
    while (true) {
      const size_t newline = pending_.find('\n', start);
      if (newline == std::string::npos) break;
      absl::StrAppend(&out, prefix_,
                      absl::string_view(pending_).substr(start, newline + 1 - start));
      start = newline + 1;
    }
    pending_.erase(0, start);
    if (pending_.size() >= kMaxLineBytes) {
      absl::StrAppend(&out, prefix_, pending_, "\n");
      pending_.clear();
    }
    WriteAll(out_fd_, out);
  }

  int fd_;
  const int out_fd_;
  const std::string prefix_;
  std::string pending_;
};

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;  // Also the worker's process group id.
  bool running = false;
  // Unknown when the worker could not be waited for (ECHILD: reaped by someone else).
  std::optional<int> wait_status;
  std::unique_ptr<LineRelay> out;
  std::unique_ptr<LineRelay> err;

  std::string Describe() const {
    return absl::StrCat("rank ", rank, " (local_rank ", local_rank, ", pid ", pid, ")");
  }

  bool Succeeded() const {
    return wait_status.has_value() && WIFEXITED(*wait_status) && WEXITSTATUS(*wait_status) == 0;
  }

  std::string DescribeExit() const {
    return absl::StrCat(Describe(), " ",
                        wait_status.has_value() ? DescribeWaitStatus(*wait_status)
                                                : "could not be waited for (reaped elsewhere)");
  }
};

struct Failure {
  int restart_count = 0;
  std::string description;  // "rank 1 (local_rank 1, pid 42) exited with code 3"
};

// One attempt's local worker group: starts it, relays its output, reaps and stops it.
class WorkerGroup {
 public:
  WorkerGroup(const LaunchOptions& options, SignalCatcher& signals)
      : options_(options), signals_(signals) {}
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  absl::Status Start(int restart_count) {
    std::vector<std::string> base;
    for (char** entry = environ; *entry != nullptr; ++entry) base.emplace_back(*entry);
    for (int local_rank = 0; local_rank < options_.nproc_per_node; ++local_rank) {
      const absl::Status started =
          StartOne(local_rank, WorkerEnvironment(options_, local_rank, restart_count, base));
      if (!started.ok()) {
        Stop(SIGTERM);
        return started;
      }
    }
    return absl::OkStatus();
  }

  // Relays output for up to `timeout`; true when the launcher caught a signal meanwhile.
  bool Pump(absl::Duration timeout) {
    std::vector<pollfd> fds = {{signals_.fd(), POLLIN, 0}};
    std::vector<LineRelay*> relays = {nullptr};
    for (Worker& worker : workers_) {
      for (LineRelay* relay : {worker.out.get(), worker.err.get()}) {
        if (relay->fd() < 0) continue;
        fds.push_back({relay->fd(), POLLIN, 0});
        relays.push_back(relay);
      }
    }
    if (::poll(fds.data(), fds.size(), PollTimeoutMs(timeout)) > 0) {
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) relays[i]->OnReadable();
      }
    }
    const std::vector<int> caught = signals_.Take();
    if (!caught.empty() && caught_signal_ == 0) caught_signal_ = caught.front();
    return !caught.empty();
  }

  // The first SIGINT/SIGTERM the launcher caught while this group ran; 0 if none.
  int caught_signal() const { return caught_signal_; }

  // Reaps the workers that exited since the last call and returns them.
  std::vector<const Worker*> Reap() {
    std::vector<const Worker*> exited;
    for (Worker& worker : workers_) {
      if (!worker.running) continue;
      int status = 0;
      const pid_t pid = ::waitpid(worker.pid, &status, WNOHANG);
      if (pid == worker.pid) {
        worker.wait_status = status;
      } else if (!(pid < 0 && errno == ECHILD)) {
        continue;
      }
      worker.running = false;
      exited.push_back(&worker);
    }
    return exited;
  }

  bool AnyRunning() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& worker) { return worker.running; });
  }

  // Stops the whole group: `signo` and SIGCONT to every worker's process group, up to the grace
  // period for them (and the processes they started) to exit, then SIGKILL to what remains. A
  // second signal to the launcher cuts the grace period short. Relays output throughout.
  void Stop(int signo) {
    SignalGroups(signo);
    // A stopped worker (SIGSTOP, a debugger, a stalled peer under test) would keep the
    // signal pending until the grace period ends: continue it so it acts on the signal now.
    SignalGroups(SIGCONT);
    const absl::Time grace_deadline = absl::Now() + options_.grace_period;
    while ((AnyRunning() || AnyGroupAlive()) && absl::Now() < grace_deadline) {
      if (Pump(std::min(kStopPollSlice, grace_deadline - absl::Now()))) {
        Log("signal received while stopping the workers: killing them now");
        break;
      }
      Reap();
    }
    SignalGroups(SIGKILL);
    const absl::Time kill_deadline = absl::Now() + kKillWait;
    while (AnyRunning() && absl::Now() < kill_deadline) {
      Pump(kStopPollSlice);
      Reap();
    }
    for (const Worker& worker : workers_) {
      if (worker.running) {
        Log(absl::StrCat(worker.Describe(), " did not exit ", absl::FormatDuration(kKillWait),
                         " after SIGKILL (stuck in the kernel?); abandoning it"));
      }
    }
    DrainOutput(absl::Now() + absl::Seconds(1));
  }

  // Relays the output left in the pipes until every stream closes or `deadline` passes; a
  // stream still open then is held by a process the worker left behind.
  void DrainOutput(absl::Time deadline) {
    while (AnyStreamOpen() && absl::Now() < deadline) {
      Pump(std::min(kStopPollSlice, deadline - absl::Now()));
    }
    for (Worker& worker : workers_) {
      if (worker.out->fd() >= 0 || worker.err->fd() >= 0) {
        Log(absl::StrCat("output of ", worker.Describe(),
                         " is still open after it exited "
                         "(held by a process it started); no longer relaying it"));
      }
      worker.out->Close();
      worker.err->Close();
    }
  }

 private:
  absl::Status StartOne(int local_rank, const std::vector<std::string>& env) {
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("pipe2 for local rank ", local_rank, " failed: ", std::strerror(errno)));
    }
    if (::pipe2(err, O_CLOEXEC) != 0) {
      const int error = errno;
      ::close(out[0]);
      ::close(out[1]);
      return absl::ResourceExhaustedError(
          absl::StrCat("pipe2 for local rank ", local_rank, " failed: ", std::strerror(error)));
    }
    // Everything the child touches is prepared before fork: it only calls async-signal-safe
    // functions between fork and exec.
    std::vector<char*> argv;
    for (const std::string& arg : options_.command) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
    envp.push_back(nullptr);
    const std::string exec_error_prefix =
        absl::StrCat("launch: cannot execute '", options_.command[0], "': ");

    // Blocked across fork so that a signal cannot reach the child while it still runs the
    // launcher's handler, which would write into the launcher's self-pipe.
    sigset_t block;
    sigset_t previous;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &block, &previous);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGPIPE, SIG_DFL);  // An ignored disposition would survive exec.
      ::sigprocmask(SIG_SETMASK, &previous, nullptr);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execvpe(argv[0], argv.data(), envp.data());
      const char* reason = std::strerror(errno);
      WriteAll(STDERR_FILENO, exec_error_prefix);
      WriteAll(STDERR_FILENO, reason);
      WriteAll(STDERR_FILENO, "\n");
      ::_exit(127);
    }
    const int fork_errno = errno;
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    ::close(out[1]);
    ::close(err[1]);
    if (pid < 0) {
      ::close(out[0]);
      ::close(err[0]);
      return absl::ResourceExhaustedError(
          absl::StrCat("fork for local rank ", local_rank, " failed: ", std::strerror(fork_errno)));
    }
    // Also set here so that the group exists before the launcher signals it, whichever of
    // parent and child runs first (EACCES once the child has exec'd is harmless).
    ::setpgid(pid, pid);
    ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, ::fcntl(err[0], F_GETFL) | O_NONBLOCK);

    Worker worker;
    worker.local_rank = local_rank;
    worker.rank = options_.node_rank * options_.nproc_per_node + local_rank;
    worker.pid = pid;
    worker.running = true;
    const std::string prefix = absl::StrCat("[rank ", worker.rank, "]: ");
    worker.out = std::make_unique<LineRelay>(out[0], STDOUT_FILENO, prefix);
    worker.err = std::make_unique<LineRelay>(err[0], STDERR_FILENO, prefix);
    workers_.push_back(std::move(worker));
    return absl::OkStatus();
  }

  // Signals every worker's process group, including groups whose leader already exited:
  // the processes it started may still be running.
  void SignalGroups(int signo) {
    for (const Worker& worker : workers_) ::kill(-worker.pid, signo);
  }

  bool AnyGroupAlive() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& worker) { return ::kill(-worker.pid, 0) == 0; });
  }

  bool AnyStreamOpen() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const Worker& worker) {
      return worker.out->fd() >= 0 || worker.err->fd() >= 0;
    });
  }

  const LaunchOptions& options_;
  SignalCatcher& signals_;
  std::vector<Worker> workers_;
  int caught_signal_ = 0;
};

enum class AttemptEnd { kSucceeded, kFailed, kInterrupted };

struct AttemptResult {
  AttemptEnd end = AttemptEnd::kSucceeded;
  std::vector<Failure> failures;  // Workers that failed on their own, not those stopped.
  int signal = 0;                 // The launcher's signal when interrupted.
};

absl::StatusOr<AttemptResult> RunAttempt(const LaunchOptions& options, SignalCatcher& signals,
                                         int restart_count) {
  const int first_rank = options.node_rank * options.nproc_per_node;
  Log(absl::StrCat("starting ranks ", first_rank, "..", first_rank + options.nproc_per_node - 1,
                   " of ", options.nnodes * options.nproc_per_node, " (master ",
                   options.master_addr, ":", options.master_port,
                   ", TORCHELASTIC_RESTART_COUNT=", restart_count, ")"));
  WorkerGroup group(options, signals);
  VISION_RETURN_IF_ERROR(group.Start(restart_count));
  AttemptResult result;
  while (true) {
    group.Pump(options.monitor_interval);
    if (const int signo = group.caught_signal(); signo != 0) {
      Log(absl::StrCat("received ", SignalName(signo), "; forwarding it to the workers"));
      group.Stop(signo);
      result.end = AttemptEnd::kInterrupted;
      result.signal = signo;
      return result;
    }
    for (const Worker* worker : group.Reap()) {
      if (!worker->Succeeded()) result.failures.push_back({restart_count, worker->DescribeExit()});
    }
    if (!result.failures.empty()) {
      for (const Failure& failure : result.failures) Log(failure.description);
      Log("stopping the other workers");
      group.Stop(SIGTERM);
      // A SIGINT/SIGTERM during the stop means the user wants out, not a restart.
      result.end = group.caught_signal() != 0 ? AttemptEnd::kInterrupted : AttemptEnd::kFailed;
      result.signal = group.caught_signal();
      return result;
    }
    if (!group.AnyRunning()) {
      group.DrainOutput(absl::Now() + options.grace_period);
      return result;
    }
  }
}

}  // namespace

absl::Status ValidateLaunchOptions(const LaunchOptions& options) {
  if (options.nproc_per_node < 1 || options.nproc_per_node > kMaxWorkersPerNode) {
    return absl::InvalidArgumentError(absl::StrCat("--nproc_per_node=", options.nproc_per_node,
                                                   " must be in 1..", kMaxWorkersPerNode,
                                                   " (usually the number of GPUs per node)."));
  }
  if (options.nnodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes=", options.nnodes, " must be at least 1."));
  }
  if (static_cast<int64_t>(options.nnodes) * options.nproc_per_node >
      std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError("--nnodes * --nproc_per_node overflows the world size.");
  }
  if (options.node_rank < 0 || options.node_rank >= options.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("--node_rank=", options.node_rank,
                                                   " must be in 0..", options.nnodes - 1,
                                                   " for --nnodes=", options.nnodes, "."));
  }
  if (options.master_addr.empty()) {
    return absl::InvalidArgumentError("--master_addr is empty; give rank 0's host.");
  }
  if (options.master_port < 1 || options.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master_port=", options.master_port, " is not a TCP port (1..65535)."));
  }
  if (options.max_restarts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_restarts=", options.max_restarts, " must be at least 0."));
  }
  if (options.monitor_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--monitor_interval_ms must be positive.");
  }
  if (options.grace_period < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--grace_period_ms must not be negative.");
  }
  if (options.command.empty()) {
    return absl::InvalidArgumentError(
        "No training command: put it after '--', e.g. "
        "launch --nproc_per_node=2 -- bazel-bin/tools/train --config=...");
  }
  return absl::OkStatus();
}

std::vector<std::string> WorkerEnvironment(const LaunchOptions& options, int local_rank,
                                           int restart_count,
                                           const std::vector<std::string>& base) {
  const std::vector<std::pair<std::string, std::string>> contract = {
      {"RANK", absl::StrCat(options.node_rank * options.nproc_per_node + local_rank)},
      {"WORLD_SIZE", absl::StrCat(options.nnodes * options.nproc_per_node)},
      {"LOCAL_RANK", absl::StrCat(local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(options.nproc_per_node)},
      {"GROUP_RANK", absl::StrCat(options.node_rank)},
      {"GROUP_WORLD_SIZE", absl::StrCat(options.nnodes)},
      {"NODE_RANK", absl::StrCat(options.node_rank)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", absl::StrCat(options.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", absl::StrCat(restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", absl::StrCat(options.max_restarts)},
  };
  auto is_set_by = [](const std::vector<std::string>& entries, absl::string_view name) {
    return std::any_of(entries.begin(), entries.end(), [&](const std::string& entry) {
      return absl::StartsWith(entry, absl::StrCat(name, "="));
    });
  };
  std::vector<std::string> env;
  for (const std::string& entry : base) {
    const absl::string_view name = absl::string_view(entry).substr(0, entry.find('='));
    const bool overridden = std::any_of(contract.begin(), contract.end(),
                                        [&](const auto& var) { return var.first == name; });
    if (!overridden) env.push_back(entry);
  }
  for (const auto& [name, value] : contract) env.push_back(absl::StrCat(name, "=", value));
  if (options.nproc_per_node > 1 && !is_set_by(base, "OMP_NUM_THREADS")) {
    env.push_back("OMP_NUM_THREADS=1");
  }
  return env;
}

absl::StatusOr<int> RunWorkers(const LaunchOptions& options) {
  VISION_RETURN_IF_ERROR(ValidateLaunchOptions(options));
  VISION_ASSIGN_OR_RETURN(const std::unique_ptr<SignalCatcher> signals, SignalCatcher::Install());

  std::vector<Failure> failures;
  for (int restart_count = 0;; ++restart_count) {
    VISION_ASSIGN_OR_RETURN(const AttemptResult attempt,
                            RunAttempt(options, *signals, restart_count));
    // The "shm" backend unlinks its segments as soon as every local rank mapped them; one is
    // left only when a worker died in that window. Its name is the job's (the port's).
    if (const int removed = shm::RemoveJobSegments(options.master_port); removed > 0) {
      Log(absl::StrCat("removed ", removed, " stale shared-memory segment(s) of this job"));
    }
    switch (attempt.end) {
      case AttemptEnd::kSucceeded:
        if (restart_count > 0) {
          Log(absl::StrCat("all workers succeeded after ", restart_count, " restart(s)"));
        }
        return 0;
      case AttemptEnd::kInterrupted:
        Log(absl::StrCat("workers stopped after ", SignalName(attempt.signal), "; exiting with ",
                         128 + attempt.signal));
        return 128 + attempt.signal;
      case AttemptEnd::kFailed:
        break;
    }
    failures.insert(failures.end(), attempt.failures.begin(), attempt.failures.end());
    if (restart_count < options.max_restarts) {
      Log(absl::StrCat("restarting the local worker group (restart ", restart_count + 1, " of ",
                       options.max_restarts, ", TORCHELASTIC_RESTART_COUNT=", restart_count + 1,
                       ")"));
      continue;
    }
    Log(absl::StrCat("worker group failed and no restarts are left (--max_restarts=",
                     options.max_restarts, ", restarts used: ", restart_count, "). Failures:"));
    for (const Failure& failure : failures) {
      Log(absl::StrCat("  attempt with TORCHELASTIC_RESTART_COUNT=", failure.restart_count, ": ",
                       failure.description));
    }
    return kWorkerFailureExitCode;
  }
}

}  // namespace vision::distributed::launch
