#include "distributed/process_group/peer_watchdog.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace vision::distributed::process_group {

using Clock = std::chrono::steady_clock;

// A rank that ends cleanly adds this to its counter: peers then know it is done.
constexpr int64_t kDone = int64_t{1} << 40;

struct PeerWatchdog::State {
  PeerWatchdogOptions options;
  std::shared_ptr<c10d::TCPStore> store;
  std::vector<std::string> keys;
  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  bool poller_done = false;
  Clock::time_point last_answer;
  std::vector<int64_t> last_value;
  std::vector<Clock::time_point> last_change;
  std::vector<bool> done;
};

namespace {

double SecondsSince(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration<double>(now - t).count();
}

void Poll(const std::shared_ptr<PeerWatchdog::State>& s) {
  const PeerWatchdogOptions& o = s->options;
  while (true) {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      stopping = s->stopping;
    }
    try {
      if (stopping) {
        s->store->add(s->keys[o.rank], kDone);
        break;
      }
      s->store->add(s->keys[o.rank], 1);
      const std::vector<std::vector<uint8_t>> values = s->store->multiGet(s->keys);
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> lock(s->mutex);
      s->last_answer = now;
      for (int r = 0; r < o.world_size; ++r) {
        int64_t value = 0;
        if (!absl::SimpleAtoi(std::string(values[r].begin(), values[r].end()), &value)) continue;
        if (value != s->last_value[r]) {
          s->last_value[r] = value;
          s->last_change[r] = now;
        }
        s->done[r] = value >= kDone;
      }
    } catch (const std::exception&) {
      // The connection broke (its host exited or crashed) and is not made again: the judge
      // goes by how long ago the last answer came. (LibTorch logs each failure with a stack.)
      break;
    }
    std::unique_lock<std::mutex> lock(s->mutex);
    s->changed.wait_for(lock, o.interval, [&] { return s->stopping; });
  }
  std::lock_guard<std::mutex> lock(s->mutex);
  s->poller_done = true;
  s->changed.notify_all();
}

void Judge(const std::shared_ptr<PeerWatchdog::State>& s) {
  const PeerWatchdogOptions& o = s->options;
  const double limit = std::chrono::duration<double>(o.limit).count();
  Clock::time_point last_wake = Clock::now();
  std::unique_lock<std::mutex> lock(s->mutex);
  while (!s->changed.wait_for(lock, o.interval, [&] { return s->stopping; })) {
    const Clock::time_point now = Clock::now();
    if (SecondsSince(last_wake, now) > limit / 2) {
      // This process itself was frozen (stopped, swapped out): the others' silence is ours.
      s->last_answer = now;
      std::fill(s->last_change.begin(), s->last_change.end(), now);
    }
    last_wake = now;
    std::string message;
    const double store_silence = SecondsSince(s->last_answer, now);
    if (store_silence > limit) {
      message = absl::StrFormat(
          "rank %d: the job's store at %s:%d, hosted by %s, has not answered for %.1f s (the "
          "limit is %.1f s, three quarters of distributed.timeout_seconds): %s stopped "
          "responding (stopped, hung or its machine unreachable). Stopping this rank so the "
          "launcher restarts or stops the group.",
          o.rank, o.master_addr, o.master_port, o.store_host, store_silence, limit, o.store_host);
    } else {
      std::vector<std::string> silent;
      for (int r = 0; r < o.world_size; ++r) {
        const double silence = SecondsSince(s->last_change[r], now);
        if (r != o.rank && !s->done[r] && silence > limit) {
          silent.push_back(absl::StrFormat("rank %d (silent for %.1f s)", r, silence));
        }
      }
      if (!silent.empty()) {
        message = absl::StrFormat(
            "rank %d: %s stopped responding: no heartbeat in the job's store for longer than "
            "%.1f s (three quarters of distributed.timeout_seconds); it is stopped, hung or its "
            "machine is unreachable. Stopping this rank so the launcher restarts or stops the "
            "group.",
            o.rank, absl::StrJoin(silent, ", "), limit);
      }
    }
    if (message.empty()) continue;
    lock.unlock();
    if (o.on_stall) {
      o.on_stall(message);
    } else {
      std::fprintf(stderr, "error: %s\n", message.c_str());
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(kPeerStalledExitCode);
    }
    return;
  }
}

}  // namespace

void SetWatchdogTimes(std::chrono::milliseconds group_timeout, PeerWatchdogOptions* options) {
  options->limit = group_timeout * 3 / 4;
  options->interval = std::clamp<std::chrono::milliseconds>(
      options->limit / 15, std::chrono::milliseconds(50), std::chrono::seconds(1));
}

absl::StatusOr<std::unique_ptr<PeerWatchdog>> PeerWatchdog::Start(PeerWatchdogOptions options) {
  if (options.world_size < 2 || options.rank < 0 || options.rank >= options.world_size ||
      options.limit.count() <= 0 || options.interval.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer watchdog: needs world_size >= 2 (got ", options.world_size,
                     "), rank in range (got ", options.rank, ") and positive limit and interval"));
  }
  auto s = std::make_shared<State>();
  s->options = std::move(options);
  const PeerWatchdogOptions& o = s->options;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(o.master_port);
    store_options.isServer = false;
    store_options.waitWorkers = false;
    store_options.timeout = o.limit;
    s->store = std::make_shared<c10d::TCPStore>(o.master_addr, store_options);
    for (int r = 0; r < o.world_size; ++r) {
      s->keys.push_back(absl::StrCat(o.key_prefix, r));
      s->store->add(s->keys.back(), 0);  // creates the key, so multiGet never waits for it
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("peer watchdog of rank ", o.rank,
                                               ": cannot use the job's store at ", o.master_addr,
                                               ":", o.master_port, ": ", e.what()));
  }
  const Clock::time_point now = Clock::now();
  s->last_answer = now;
  s->last_value.assign(o.world_size, -1);
  s->last_change.assign(o.world_size, now);
  s->done.assign(o.world_size, false);
  // The poller may block in the store (its host frozen): it is detached and keeps the state
  // alive itself; the judge is joined.
  std::thread([s] { Poll(s); }).detach();
  std::unique_ptr<PeerWatchdog> watchdog(new PeerWatchdog(s));
  watchdog->judge_ = std::thread([s] { Judge(s); });
  return watchdog;
}

PeerWatchdog::~PeerWatchdog() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stopping = true;
  state_->changed.notify_all();
  // Give the poller a moment to mark this rank done; it may be stuck on a frozen store.
  state_->changed.wait_for(lock, std::chrono::seconds(1), [&] { return state_->poller_done; });
  lock.unlock();
  if (judge_.joinable()) judge_.join();
}

}  // namespace vision::distributed::process_group
