// A process-wide timeline of spans (forward, backward, each gradient bucket's fill, launch and
// all-reduce, the optimizer step, the data wait, ...) that is written as a Chrome Trace Event
// Format file, which Perfetto (ui.perfetto.dev) and chrome://tracing open.
//
// Off by default. While off, the only cost at a call site is one relaxed atomic load
// (trace::Enabled()); callers check it before reading clocks or building names. Recording is
// switched on and off for a window of steps (TrainPipelineConfig.logging.trace) and each rank
// writes its own file (trace_rank<k>.json): pid is the rank, tid a lane (a thread, or a named
// lane such as one gradient bucket's communication).
#ifndef VISION_CORE_TRACE_H_
#define VISION_CORE_TRACE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace vision::core::trace {

namespace internal {
extern std::atomic<bool> enabled;
}  // namespace internal

// True between Start() and Stop(). Cheap: call it before doing any tracing work.
inline bool Enabled() { return internal::enabled.load(std::memory_order_relaxed); }

// Microseconds on the steady clock; the timestamps of every span.
int64_t NowUs();

// Discards what was recorded, names the process ("rank <rank>") and starts recording.
void Start(int rank);
// Stops recording. Runs the deferred resolvers (AddDeferred) first, so device spans whose
// timing is only known once the device finished (CUDA events) are recorded too.
void Stop();

// The lane (Chrome "tid") of the calling thread: small integers from 1, in order of first use.
int ThreadLane();
// A lane of its own for something that is not a thread (e.g. one bucket's collectives):
// the same name always gives the same lane. Lanes are named in the written trace.
int NamedLane(const std::string& name);
// Names the calling thread's lane ("main", "autograd", ...).
void NameThisThread(const std::string& name);

// One complete span ("ph":"X"). `args` become the event's "args" (numbers).
void Record(std::string_view name, std::string_view category, int64_t start_us, int64_t end_us,
            int lane, std::vector<std::pair<std::string, double>> args = {});

// Runs `resolve` in Stop() while recording is still on (under no lock of the recorder): for
// spans measured by a device whose clocks can only be read after it finished.
void AddDeferred(std::function<void()> resolve);

// Writes what was recorded as {"traceEvents": [...], "displayTimeUnit": "ms"} to `path`
// (through a temporary file and a rename: never half-written). Timestamps start near 0.
absl::Status WriteChromeTrace(const std::string& path);

// Number of spans recorded since Start() (for tests and logs).
size_t NumEvents();

// Records [construction, destruction) as a span on the calling thread's lane, if tracing was on
// at construction.
class ScopedSpan {
 public:
  ScopedSpan(const char* name, const char* category)
      : name_(name), category_(category), start_us_(Enabled() ? NowUs() : -1) {}
  ~ScopedSpan() {
    if (start_us_ >= 0) Record(name_, category_, start_us_, NowUs(), ThreadLane());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  const char* name_;
  const char* category_;
  int64_t start_us_;
};

}  // namespace vision::core::trace

#endif  // VISION_CORE_TRACE_H_
