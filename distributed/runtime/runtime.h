// Joins the job this process belongs to: one process, or a c10d process group formed from the
// launcher's environment (torchrun, Slurm, //tools:launch), exposed to the engine as
// core::Collectives.
#ifndef VISION_DISTRIBUTED_RUNTIME_RUNTIME_H_
#define VISION_DISTRIBUTED_RUNTIME_RUNTIME_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/collectives.h"
#include "core/config/pipeline.pb.h"
#include "distributed/env/distributed_env.h"

namespace vision::distributed::runtime {

// SingleProcess when env.world_size == 1; otherwise rendezvous and a process group with the
// configured backend (AUTO: NCCL on CUDA devices, Gloo otherwise) and timeout.
absl::StatusOr<std::unique_ptr<core::Collectives>> JoinJob(const env::DistributedEnv& env,
                                                           const core::TrainPipelineConfig& config);

}  // namespace vision::distributed::runtime

#endif  // VISION_DISTRIBUTED_RUNTIME_RUNTIME_H_
