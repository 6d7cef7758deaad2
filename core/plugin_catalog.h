// Every plugin family and what this binary registers in each: the one list of families, for
// the tools that list or check plugins (tools/train --list_plugins, //tools:plugin_table_main,
// //tools:registration_test).
#ifndef VISION_CORE_PLUGIN_CATALOG_H_
#define VISION_CORE_PLUGIN_CATALOG_H_

#include <string>
#include <vector>

#include "core/registry.h"

namespace vision::core {

struct FamilyRegistrations {
  std::string family;                 // Interface::kFamily: "model", "backbone", ...
  std::string title;                  // for listings: "models", "lr schedules", ...
  std::vector<Registration> plugins;  // sorted by name
};

// The families in a fixed order (model, backbone, dataset, augmentation, optimizer,
// lr_schedule, comm_strategy, evaluator, hook), each with what is linked into this binary.
std::vector<FamilyRegistrations> RegisteredPlugins();

}  // namespace vision::core

#endif  // VISION_CORE_PLUGIN_CATALOG_H_
