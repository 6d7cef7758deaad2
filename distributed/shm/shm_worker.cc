// Test worker for shm_restart_test: all-reduces through the "shm" backend under the launcher.
// In the first attempt rank 1 kills itself (SIGKILL) in the middle of the all-reduces, so the
// launcher must restart the group; every attempt checks that its segment is no longer named in
// /dev/shm once the group exists, and the second one checks every sum.
#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "distributed/env/distributed_env.h"
#include "distributed/process_group/process_group.h"
#include "distributed/shm/segment_name.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "shm_worker: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main() {
  namespace vd = vision::distributed;
  const auto env = vd::env::ReadDistributedEnv();
  if (!env.ok()) return Fail(std::string(env.status().message()));
  const auto group = vd::process_group::CreateProcessGroup(
      vd::process_group::OptionsFromEnv(*env, "shm", std::chrono::seconds(20)));
  if (!group.ok()) return Fail(std::string(group.status().message()));
  // The segment of this attempt is unlinked once the group exists.
  const std::string segment =
      vd::shm::SegmentName(env->master_port, env->restart_count, env->group_rank);
  if (access((std::string(vd::shm::kShmDirectory) + segment).c_str(), F_OK) == 0) {
    return Fail("segment still named: " + segment);
  }
  for (int step = 0; step < 20; ++step) {
    if (env->restart_count == 0 && env->rank == 1 && step == 5) raise(SIGKILL);
    std::vector<at::Tensor> t = {at::full({1 << 20}, env->rank + 1 + step, at::kFloat)};
    try {
      (*group)->allreduce(t)->wait();
    } catch (const std::exception& e) {
      return Fail(e.what());
    }
    float want = 0;
    for (int r = 0; r < env->world_size; ++r) want += r + 1 + step;
    if (!at::all(t[0] == want).item<bool>()) return Fail("wrong sum");
  }
  std::printf("done restart=%d\n", env->restart_count);
  return 0;
}
