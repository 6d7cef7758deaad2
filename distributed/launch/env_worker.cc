// Test worker: prints what ReadDistributedEnv makes of the environment the launcher set, so
// the launcher test checks the contract end to end, through the reader the trainer uses.
#include <cstdio>

#include "distributed/env/distributed_env.h"

int main() {
  const absl::StatusOr<vision::distributed::env::DistributedEnv> env =
      vision::distributed::env::ReadDistributedEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", std::string(env.status().message()).c_str());
    return 1;
  }
  std::printf(
      "source=%s rank=%d world_size=%d local_rank=%d local_world_size=%d group_rank=%d "
      "node_rank=%d master=%s:%d restart_count=%d\n",
      std::string(vision::distributed::env::EnvSourceName(env->source)).c_str(), env->rank,
      env->world_size, env->local_rank, env->local_world_size, env->group_rank,
      env->node_rank.value_or(-1), env->master_addr.c_str(), env->master_port, env->restart_count);
  return 0;
}
