// The LR-schedule family: the learning rate as a factor of the base rate at each step.
// Warmup (core/lr_warmup.h) wraps any schedule.
#ifndef VISION_CORE_LR_SCHEDULE_H_
#define VISION_CORE_LR_SCHEDULE_H_

#include <cstdint>

#include "core/plugin.h"

namespace vision::core {

class LrSchedule {
 public:
  static constexpr char kFamily[] = "lr_schedule";
  virtual ~LrSchedule() = default;

  // Multiplier of the base learning rate at optimizer step `step` in [0, total_steps).
  virtual double Factor(int64_t step, int64_t total_steps) const = 0;
};

using LrScheduleRegistry = PluginRegistry<LrSchedule>;

}  // namespace vision::core

#endif  // VISION_CORE_LR_SCHEDULE_H_
