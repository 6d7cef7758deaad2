// Names a rank that stopped responding. Gloo's own timeout says only that some operation
// timed out; a rank frozen by SIGSTOP, swapping, or an unreachable machine then surfaces as an
// anonymous error on every other rank, or not at all while they wait in a collective.
//
// Every rank runs a watchdog: a thread that, every `interval`, increments the rank's heartbeat
// counter in the job's store (its own TCPStore client connection) and reads every other rank's;
// a second thread judges. A peer whose counter has not moved for `limit`, or a store that has
// not answered for `limit` (its host, rank 0 under //tools:launch, is frozen), is reported by
// name through `on_stall` (by default: the message on stderr and std::_Exit with
// kPeerStalledExitCode, so the launcher sees this rank fail and restarts or stops the group,
// the frozen rank included). The heartbeat runs beside the training thread, so a rank that is
// merely slow (a long evaluation, a big checkpoint) keeps beating; only a frozen process stops.
// A rank that ends cleanly marks itself done and is not reported afterwards. When this
// process itself was frozen (its judge woke late), the silence of the others is forgiven.
#ifndef VISION_DISTRIBUTED_PROCESS_GROUP_PEER_WATCHDOG_H_
#define VISION_DISTRIBUTED_PROCESS_GROUP_PEER_WATCHDOG_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace vision::distributed::process_group {

// Exit code of a rank that stopped because a peer stalled (EX_TEMPFAIL: a restart may help).
inline constexpr int kPeerStalledExitCode = 75;

struct PeerWatchdogOptions {
  int rank = 0;
  int world_size = 1;
  // The job's store (the rendezvous store of CreateProcessGroup).
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Who hosts the store, for messages.
  std::string store_host = "rank 0";
  // Keys live under this prefix; give each restart its own (TORCHELASTIC_RESTART_COUNT), as
  // torchrun's agent keeps its store across restarts.
  std::string key_prefix = "vision/heartbeat/0/";
  // Silence after which a peer is reported; what the job's timeout means for this watchdog
  // is the caller's choice (see WatchdogLimitFor).
  std::chrono::milliseconds limit{std::chrono::seconds(225)};
  std::chrono::milliseconds interval{std::chrono::seconds(1)};
  // Called once, from the judge thread, with the message. Null: print and std::_Exit.
  std::function<void(const std::string& message)> on_stall;
};

// The limit and interval for a process group timeout: three quarters of it (a frozen peer is
// named before the collectives' own timeout gives an anonymous error), checked 15 times per
// limit, between 50 ms and 1 s apart.
void SetWatchdogTimes(std::chrono::milliseconds group_timeout, PeerWatchdogOptions* options);

class PeerWatchdog {
 public:
  // Connects to the store and starts the threads. The store must be up (after the rendezvous).
  static absl::StatusOr<std::unique_ptr<PeerWatchdog>> Start(PeerWatchdogOptions options);
  // Marks this rank done (so peers finishing later do not report it) and stops the threads.
  ~PeerWatchdog();
  PeerWatchdog(const PeerWatchdog&) = delete;
  PeerWatchdog& operator=(const PeerWatchdog&) = delete;

  struct State;

 private:
  explicit PeerWatchdog(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
  std::thread judge_;
};

}  // namespace vision::distributed::process_group

#endif  // VISION_DISTRIBUTED_PROCESS_GROUP_PEER_WATCHDOG_H_
