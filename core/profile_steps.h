// Profiling a few steps of a benchmark with LibTorch's Kineto profiler, for side-by-side
// operator tables against a Python peer's torch.profiler trace (benchmarks/op_table.py).
#ifndef VISION_CORE_PROFILE_STEPS_H_
#define VISION_CORE_PROFILE_STEPS_H_

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace vision::core {

// Runs `step` `steps` times (stopping at the first error, which is returned) under the Kineto
// profiler, recording CPU operators with their input shapes, and writes the result to `path`
// in torch.profiler's Chrome trace format.
absl::Status ProfileSteps(int steps, const std::function<absl::Status()>& step,
                          const std::string& path);

}  // namespace vision::core

#endif  // VISION_CORE_PROFILE_STEPS_H_
