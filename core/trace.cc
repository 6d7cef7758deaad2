#include "core/trace.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace vision::core::trace {
namespace internal {
std::atomic<bool> enabled{false};
}  // namespace internal

namespace {

struct Event {
  std::string name;
  std::string category;
  int64_t start_us;
  int64_t dur_us;
  int lane;
  std::vector<std::pair<std::string, double>> args;
};

struct Recorder {
  std::mutex mutex;
  int rank = 0;
  std::vector<Event> events;
  std::map<int, std::string> lane_names;
  std::map<std::string, int> named_lanes;
  std::vector<std::function<void()>> deferred;
  int next_lane = 1;
};

Recorder& Get() {
  static Recorder* recorder = new Recorder();  // Never destroyed: threads may record at exit.
  return *recorder;
}

thread_local int this_thread_lane = 0;

void AppendEscaped(std::ostringstream& out, std::string_view text) {
  out << '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out << "\\\"";
        break;
      case '\\':
        out << "\\\\";
        break;
      case '\n':
        out << "\\n";
        break;
      case '\t':
        out << "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out << buffer;
        } else {
          out << c;
        }
    }
  }
  out << '"';
}

}  // namespace

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Start(int rank) {
  Recorder& r = Get();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.rank = rank;
    r.events.clear();
    r.deferred.clear();
  }
  internal::enabled.store(true, std::memory_order_relaxed);
}

void Stop() {
  Recorder& r = Get();
  std::vector<std::function<void()>> deferred;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    deferred.swap(r.deferred);
  }
  for (const auto& resolve : deferred) resolve();
  internal::enabled.store(false, std::memory_order_relaxed);
}

int ThreadLane() {
  if (this_thread_lane != 0) return this_thread_lane;
  Recorder& r = Get();
  std::lock_guard<std::mutex> lock(r.mutex);
  this_thread_lane = r.next_lane++;
  r.lane_names.emplace(this_thread_lane, absl::StrCat("thread ", this_thread_lane));
  return this_thread_lane;
}

int NamedLane(const std::string& name) {
  Recorder& r = Get();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, inserted] = r.named_lanes.emplace(name, 0);
  if (inserted) {
    // Named lanes sort after the threads in the viewers (which order by tid).
    it->second = 1000 + static_cast<int>(r.named_lanes.size());
    r.lane_names[it->second] = name;
  }
  return it->second;
}

void NameThisThread(const std::string& name) {
  const int lane = ThreadLane();
  Recorder& r = Get();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.lane_names[lane] = name;
}

void Record(std::string_view name, std::string_view category, int64_t start_us, int64_t end_us,
            int lane, std::vector<std::pair<std::string, double>> args) {
  if (!Enabled()) return;
  Recorder& r = Get();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.push_back(Event{std::string(name), std::string(category), start_us,
                           std::max<int64_t>(0, end_us - start_us), lane, std::move(args)});
}

void AddDeferred(std::function<void()> resolve) {
  if (!Enabled()) return;
  Recorder& r = Get();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.deferred.push_back(std::move(resolve));
}

size_t NumEvents() {
  Recorder& r = Get();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.events.size();
}

absl::Status WriteChromeTrace(const std::string& path) {
  Recorder& r = Get();
  std::ostringstream out;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    int64_t origin = 0;
    for (size_t i = 0; i < r.events.size(); ++i) {
      if (i == 0 || r.events[i].start_us < origin) origin = r.events[i].start_us;
    }
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    out << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << r.rank
        << ",\"tid\":0,\"ts\":0,\"args\":{\"name\":\"rank " << r.rank << "\"}}";
    for (const auto& [lane, name] : r.lane_names) {
      out << ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << r.rank << ",\"tid\":" << lane
          << ",\"ts\":0,\"args\":{\"name\":";
      AppendEscaped(out, name);
      out << "}}";
    }
    for (const Event& e : r.events) {
      out << ",\n{\"ph\":\"X\",\"name\":";
      AppendEscaped(out, e.name);
      out << ",\"cat\":";
      AppendEscaped(out, e.category);
      out << ",\"pid\":" << r.rank << ",\"tid\":" << e.lane << ",\"ts\":" << e.start_us - origin
          << ",\"dur\":" << e.dur_us;
      if (!e.args.empty()) {
        out << ",\"args\":{";
        for (size_t i = 0; i < e.args.size(); ++i) {
          if (i > 0) out << ',';
          AppendEscaped(out, e.args[i].first);
          const double v = e.args[i].second;
          out << ':';
          if (std::isfinite(v)) {
            out << v;
          } else {
            out << "null";
          }
        }
        out << '}';
      }
      out << '}';
    }
    out << "\n]}\n";
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file) {
      return absl::PermissionDeniedError(
          absl::StrCat("trace: cannot create ", tmp,
                       " (does the directory exist and is it writable? set "
                       "logging.trace.path to a writable directory)"));
    }
    file << out.str();
    file.close();
    if (!file) {
      std::remove(tmp.c_str());
      return absl::DataLossError(absl::StrCat("trace: writing ", tmp, " failed (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("trace: cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace vision::core::trace
