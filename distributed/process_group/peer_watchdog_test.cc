#include "distributed/process_group/peer_watchdog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

namespace vision::distributed::process_group {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using namespace std::chrono_literals;

// A store on a free port, as rank 0 hosts it.
std::unique_ptr<c10d::TCPStore> HostStore() {
  c10d::TCPStoreOptions o;
  o.port = 0;
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = 10s;
  return std::make_unique<c10d::TCPStore>("127.0.0.1", o);
}

struct Reports {
  std::mutex mutex;
  std::vector<std::string> messages;
  std::vector<std::string> Get() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages;
  }
};

// The silence after which a peer is reported. Long enough that a thread of this test (or of a
// watchdog) starved on a busy machine does not look like a frozen peer: with 600 ms,
// ReportsAStoreThatStoppedAnswering failed 1 run in 3 under load (the fake rank 0 had not beaten
// for 600 ms while the store still answered, so rank 0 was named instead of the store).
constexpr std::chrono::milliseconds kLimit = 2s;

PeerWatchdogOptions Options(int rank, int world_size, int port, Reports* reports) {
  PeerWatchdogOptions o;
  o.rank = rank;
  o.world_size = world_size;
  o.master_port = port;
  o.key_prefix = "test/heartbeat/";
  o.limit = kLimit;
  o.interval = 50ms;
  o.on_stall = [reports](const std::string& message) {
    std::lock_guard<std::mutex> lock(reports->mutex);
    reports->messages.push_back(message);
  };
  return o;
}

TEST(PeerWatchdogTest, LimitIsThreeQuartersOfTheGroupTimeout) {
  PeerWatchdogOptions o;
  SetWatchdogTimes(300s, &o);
  EXPECT_EQ(o.limit, 225s);
  EXPECT_EQ(o.interval, 1s);
  SetWatchdogTimes(4s, &o);
  EXPECT_EQ(o.limit, 3s);
  EXPECT_EQ(o.interval, 200ms);
  SetWatchdogTimes(100ms, &o);
  EXPECT_EQ(o.interval, 50ms);
}

TEST(PeerWatchdogTest, LivePeersAreNotReportedNorIsOneThatEndedCleanly) {
  auto store = HostStore();
  Reports reports0, reports1, reports2;
  auto w0 = PeerWatchdog::Start(Options(0, 3, store->getPort(), &reports0));
  auto w1 = PeerWatchdog::Start(Options(1, 3, store->getPort(), &reports1));
  auto w2 = PeerWatchdog::Start(Options(2, 3, store->getPort(), &reports2));
  ASSERT_TRUE(w0.ok()) << w0.status();
  ASSERT_TRUE(w1.ok()) << w1.status();
  ASSERT_TRUE(w2.ok()) << w2.status();
  std::this_thread::sleep_for(2 * kLimit);
  EXPECT_THAT(reports0.Get(), IsEmpty());
  EXPECT_THAT(reports1.Get(), IsEmpty());
  EXPECT_THAT(reports2.Get(), IsEmpty());
  // Rank 2 finishes first: the others keep running past the limit without reporting it.
  w2->reset();
  std::this_thread::sleep_for(2 * kLimit);
  EXPECT_THAT(reports0.Get(), IsEmpty());
  EXPECT_THAT(reports1.Get(), IsEmpty());
}

TEST(PeerWatchdogTest, NamesThePeerThatStoppedBeating) {
  auto store = HostStore();
  Reports reports0, reports1, reports2;
  auto w0 = PeerWatchdog::Start(Options(0, 3, store->getPort(), &reports0));
  auto w2 = PeerWatchdog::Start(Options(2, 3, store->getPort(), &reports2));
  ASSERT_TRUE(w0.ok()) << w0.status();
  ASSERT_TRUE(w2.ok()) << w2.status();
  // Rank 1 beats for a while, then freezes: its counter stops moving without a done mark,
  // as a process stopped by SIGSTOP leaves it.
  for (int i = 0; i < 10; ++i) {
    store->add("test/heartbeat/1", 1);
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_THAT(reports0.Get(), IsEmpty());
  const auto frozen = std::chrono::steady_clock::now();
  while ((reports0.Get().empty() || reports2.Get().empty()) &&
         std::chrono::steady_clock::now() - frozen < 10s) {
    std::this_thread::sleep_for(20ms);
  }
  const std::vector<std::string> seen0 = reports0.Get(), seen2 = reports2.Get();
  ASSERT_EQ(seen0.size(), 1u);
  ASSERT_EQ(seen2.size(), 1u);
  EXPECT_THAT(seen0[0], HasSubstr("rank 0: rank 1 (silent for"));
  EXPECT_THAT(seen0[0], HasSubstr("stopped responding"));
  EXPECT_THAT(seen0[0], Not(HasSubstr("rank 2")));
  EXPECT_THAT(seen2[0], HasSubstr("rank 2: rank 1 (silent for"));
  // Not before the limit (less the interval at which the last beat was seen).
  EXPECT_GE(std::chrono::steady_clock::now() - frozen, kLimit - 100ms);
}

TEST(PeerWatchdogTest, ReportsAStoreThatStoppedAnswering) {
  auto store = HostStore();
  Reports reports1;
  const int port = store->getPort();
  auto w1 = PeerWatchdog::Start(Options(1, 2, port, &reports1));
  ASSERT_TRUE(w1.ok()) << w1.status();
  for (int i = 0; i < 10; ++i) {
    store->add("test/heartbeat/0", 1);
    std::this_thread::sleep_for(50ms);
  }
  store.reset();  // the host is gone: no more answers
  const auto gone = std::chrono::steady_clock::now();
  while (reports1.Get().empty() && std::chrono::steady_clock::now() - gone < 10s) {
    std::this_thread::sleep_for(20ms);
  }
  const std::vector<std::string> seen = reports1.Get();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_THAT(seen[0], HasSubstr("hosted by rank 0"));
  EXPECT_THAT(seen[0], HasSubstr(std::to_string(port)));
}

TEST(PeerWatchdogTest, RefusesBadOptions) {
  Reports reports;
  EXPECT_FALSE(PeerWatchdog::Start(Options(0, 1, 1, &reports)).ok());
  EXPECT_FALSE(PeerWatchdog::Start(Options(2, 2, 1, &reports)).ok());
}

}  // namespace
}  // namespace vision::distributed::process_group
