#include "distributed/process_group/multiprocess_testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace vision::distributed::process_group {
namespace {

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string ReadAll(int fd) {
  std::string data;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) data.append(buffer, static_cast<size_t>(n));
  return data;
}

}  // namespace

int PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) std::abort();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    std::abort();
  }
  close(fd);
  return ntohs(addr.sin_port);
}

std::vector<absl::Status> RunRanks(int world_size, absl::Duration deadline,
                                   const std::function<absl::Status(int rank)>& fn) {
  std::vector<pid_t> pids(world_size, -1);
  std::vector<int> pipes(world_size, -1);
  for (int rank = 0; rank < world_size; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    const pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      close(fds[0]);
      absl::Status status;
      try {
        status = fn(rank);
      } catch (const std::exception& e) {
        status = absl::InternalError(absl::StrCat("uncaught exception: ", e.what()));
      }
      // Code byte, then the message; _exit skips the parent's gtest and static destructors.
      WriteAll(fds[1], absl::StrCat(static_cast<int>(status.code()), "\n", status.message()));
      close(fds[1]);
      _exit(0);
    }
    close(fds[1]);
    pids[rank] = pid;
    pipes[rank] = fds[0];
  }

  std::vector<absl::Status> statuses(world_size);
  std::vector<bool> done(world_size, false);
  std::vector<int> wait_status(world_size, 0);
  const absl::Time end = absl::Now() + deadline;
  int remaining = world_size;
  while (remaining > 0 && absl::Now() < end) {
    for (int rank = 0; rank < world_size; ++rank) {
      if (done[rank]) continue;
      if (waitpid(pids[rank], &wait_status[rank], WNOHANG) == pids[rank]) {
        done[rank] = true;
        --remaining;
      }
    }
    if (remaining > 0) absl::SleepFor(absl::Milliseconds(20));
  }
  for (int rank = 0; rank < world_size; ++rank) {
    if (!done[rank]) {
      kill(pids[rank], SIGKILL);
      waitpid(pids[rank], nullptr, 0);
      close(pipes[rank]);
      statuses[rank] = absl::DeadlineExceededError(
          absl::StrCat("rank ", rank, " still ran after ", absl::FormatDuration(deadline)));
      continue;
    }
    const std::string report = ReadAll(pipes[rank]);
    close(pipes[rank]);
    const size_t newline = report.find('\n');
    if (!WIFEXITED(wait_status[rank]) || WEXITSTATUS(wait_status[rank]) != 0 ||
        newline == std::string::npos) {
      statuses[rank] = absl::InternalError(absl::StrCat(
          "rank ", rank, " crashed (",
          WIFSIGNALED(wait_status[rank]) ? absl::StrCat("signal ", WTERMSIG(wait_status[rank]))
                                         : absl::StrCat("exit ", WEXITSTATUS(wait_status[rank])),
          ")"));
      continue;
    }
    statuses[rank] = absl::Status(static_cast<absl::StatusCode>(std::atoi(report.c_str())),
                                  report.substr(newline + 1));
  }
  return statuses;
}

}  // namespace vision::distributed::process_group
