// Which Bazel target registers each plugin of //tools:all_plugins, so that a training target's
// dry-run test can say what to add to its `deps`. The registry knows only what a binary links;
// a plugin that is not linked leaves no trace in it, hence a table, written at build time by
// //tools:plugin_table_main (which links all_plugins) from the label and options type that each
// registration records (core/plugin.h, core/plugin.bzl): nobody edits it.
#ifndef VISION_TOOLS_PLUGIN_TARGETS_H_
#define VISION_TOOLS_PLUGIN_TARGETS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vision::tools {

struct PluginTarget {
  const char* family;        // Interface::kFamily: "model", "backbone", ...
  const char* name;          // the registered type a config names
  const char* options_type;  // full name of its options message (type URLs name it)
  const char* label;         // the target to add to a training target's deps
};

// Sorted by family (core/plugin_catalog.h's order), then name.
const std::vector<PluginTarget>& PluginTargets();

// The plugins `config_text` needs that this binary does not link, one sentence each, naming the
// plugin (family and type) and the target to add to `target`'s deps:
//  - options types (`[type.googleapis.com/X]`) absent from the linked descriptor pool: the
//    config does not even parse without them;
//  - the plugin a registry lookup missed, when `build_status` carries one (UnknownPluginOf).
// Empty when nothing is known to be missing.
std::vector<std::string> MissingPluginHints(const std::string& config_text,
                                            const absl::Status& build_status,
                                            const std::string& target);

}  // namespace vision::tools

#endif  // VISION_TOOLS_PLUGIN_TARGETS_H_
