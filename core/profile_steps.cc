#include "core/profile_steps.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <memory>
#include <set>

namespace vision::core {

absl::Status ProfileSteps(int steps, const std::function<absl::Status()>& step,
                          const std::string& path) {
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     /*report_input_shapes=*/true);
  const std::set<ActivityType> activities = {ActivityType::CPU};
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  absl::Status status;
  for (int i = 0; i < steps && status.ok(); ++i) status = step();
  std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  if (!status.ok()) return status;
  if (result == nullptr) return absl::InternalError("the profiler returned no result");
  result->save(path);
  return absl::OkStatus();
}

}  // namespace vision::core
