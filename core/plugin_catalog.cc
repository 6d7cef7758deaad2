#include "core/plugin_catalog.h"

#include "core/augmentation.h"
#include "core/backbone.h"
#include "core/comm_strategy.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/hook.h"
#include "core/lr_schedule.h"
#include "core/model.h"
#include "core/optimizer.h"

namespace vision::core {
namespace {

template <typename RegistryT>
FamilyRegistrations Of(const char* title) {
  const RegistryT& registry = RegistryT::Get();
  return {registry.family(), title, registry.Registrations()};
}

}  // namespace

std::vector<FamilyRegistrations> RegisteredPlugins() {
  return {
      Of<ModelRegistry>("models"),
      Of<BackboneRegistry>("backbones"),
      Of<DatasetRegistry>("datasets"),
      Of<AugmentationRegistry>("augmentations"),
      Of<OptimizerRegistry>("optimizers"),
      Of<LrScheduleRegistry>("lr schedules"),
      Of<CommStrategyRegistry>("comm strategies"),
      Of<EvaluatorRegistry>("evaluators"),
      Of<HookRegistry>("hooks"),
  };
}

}  // namespace vision::core
