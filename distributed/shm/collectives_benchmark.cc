// The collectives alone, shared memory against Gloo over loopback: the time of one sum
// all-reduce of a float buffer of each size, world ranks forked here on one host, both backends
// measured side by side in one run (alternating per repeat, so drifting machine load hits both).
// Prints the median ms per all-reduce (and the best repeat's, telling on a busy machine), the
// bandwidth (buffer bytes / median time) and Gloo / shm of the medians.
//
//   bazel run -c opt //distributed/shm:collectives_benchmark -- --world=2 --sizes_mb=1,4,10,25
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "distributed/process_group/multiprocess_testing.h"
#include "distributed/process_group/process_group.h"

ABSL_FLAG(int, world, 2, "ranks, forked on this host");
ABSL_FLAG(std::string, sizes_mb, "1,4,10,25", "buffer sizes in MiB");
ABSL_FLAG(int, iters, 20, "all-reduces timed per size, backend and repeat");
ABSL_FLAG(int, repeats, 5, "alternating repeats per size; the median is printed");
ABSL_FLAG(int, threads, 1, "intra-op threads per rank");

namespace vision::distributed::shm {
namespace {

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> Group(const std::string& backend, int rank,
                                                             int world, int port) {
  process_group::ProcessGroupOptions options;
  options.rank = rank;
  options.world_size = world;
  options.master_port = port;
  options.backend = backend;
  options.timeout = std::chrono::seconds(120);
  return process_group::CreateProcessGroup(options);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Milliseconds per all-reduce of `buffer` through `group`, `iters` in a row.
double Time(c10d::ProcessGroup& group, at::Tensor& buffer, int iters) {
  std::vector<at::Tensor> one = {buffer};
  group.barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) group.allreduce(one)->wait();
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / iters;
}

int Main() {
  const int world = absl::GetFlag(FLAGS_world);
  std::vector<double> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mb), ',')) {
    sizes.push_back(std::stod(std::string(s)));
  }
  const int gloo_port = process_group::PickFreePort();
  const int shm_port = process_group::PickFreePort();
  const auto statuses = process_group::RunRanks(world, absl::Minutes(30), [&](int rank) {
    at::set_num_threads(absl::GetFlag(FLAGS_threads));
    auto gloo = Group("gloo", rank, world, gloo_port);
    if (!gloo.ok()) return gloo.status();
    auto shm = Group("shm", rank, world, shm_port);
    if (!shm.ok()) return shm.status();
    if (rank == 0) {
      std::printf("world %d, %d threads per rank; median of %d repeats of %d all-reduces\n", world,
                  absl::GetFlag(FLAGS_threads), absl::GetFlag(FLAGS_repeats),
                  absl::GetFlag(FLAGS_iters));
      std::printf("%8s %10s %10s %10s %10s %10s %10s %10s\n", "MiB", "gloo ms", "shm ms",
                  "gloo best", "shm best", "gloo GB/s", "shm GB/s", "gloo/shm");
    }
    for (double mb : sizes) {
      const int64_t numel = static_cast<int64_t>(mb * (1 << 20)) / 4;
      at::Tensor buffer = at::randn({numel});
      std::vector<double> gloo_ms, shm_ms;
      Time(**gloo, buffer, 2);  // Warm-up: connections, pages.
      Time(**shm, buffer, 2);
      for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
        gloo_ms.push_back(Time(**gloo, buffer, absl::GetFlag(FLAGS_iters)));
        shm_ms.push_back(Time(**shm, buffer, absl::GetFlag(FLAGS_iters)));
      }
      const double g = Median(gloo_ms), s = Median(shm_ms);
      const double bytes = static_cast<double>(numel) * 4;
      if (rank == 0) {
        std::printf("%8.1f %10.3f %10.3f %10.3f %10.3f %10.2f %10.2f %10.2f\n", mb, g, s,
                    *std::min_element(gloo_ms.begin(), gloo_ms.end()),
                    *std::min_element(shm_ms.begin(), shm_ms.end()), bytes / g / 1e6,
                    bytes / s / 1e6, g / s);
        std::fflush(stdout);
      }
    }
    return absl::OkStatus();
  });
  int code = 0;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      std::fprintf(stderr, "rank %zu: %s\n", r, std::string(statuses[r].message()).c_str());
      code = 1;
    }
  }
  return code;
}

}  // namespace
}  // namespace vision::distributed::shm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return vision::distributed::shm::Main();
}
