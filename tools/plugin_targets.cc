#include "tools/plugin_targets.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/registry.h"
#include "google/protobuf/descriptor.h"

namespace vision::tools {

// PluginTargets() is written at build time from the plugins' own registrations
// (//tools:plugin_targets_table).

namespace {

std::string Hint(const PluginTarget& plugin, const std::string& target) {
  return absl::StrCat(plugin.family, " '", plugin.name, "' is not linked into ", target, ": add \"",
                      plugin.label, "\" to its deps");
}

}  // namespace

std::vector<std::string> MissingPluginHints(const std::string& config_text,
                                            const absl::Status& build_status,
                                            const std::string& target) {
  std::vector<std::string> hints;
  constexpr char kPrefix[] = "type.googleapis.com/";
  std::set<std::string> seen;
  for (size_t at = config_text.find(kPrefix); at != std::string::npos;
       at = config_text.find(kPrefix, at + 1)) {
    const size_t begin = at + sizeof(kPrefix) - 1;
    const size_t end = config_text.find(']', begin);
    if (end == std::string::npos) continue;
    const std::string type = config_text.substr(begin, end - begin);
    if (!seen.insert(type).second) continue;
    if (google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type) !=
        nullptr) {
      continue;
    }
    // Several plugins may share an options type (ResNet18..101); any of them names the target.
    const PluginTarget* owner = nullptr;
    for (const PluginTarget& plugin : PluginTargets()) {
      if (type == plugin.options_type) {
        owner = &plugin;
        break;
      }
    }
    if (owner != nullptr) {
      hints.push_back(absl::StrCat("options type ", type, ": the ", Hint(*owner, target)));
    } else {
      hints.push_back(absl::StrCat(
          "options type ", type, " is not linked into ", target,
          " and no plugin of //tools:all_plugins declares it: check "
          "its spelling, or add the target of the plugin whose options it is to the deps"));
    }
  }
  const std::optional<core::UnknownPlugin> missed = core::UnknownPluginOf(build_status);
  if (missed.has_value()) {
    const PluginTarget* owner = nullptr;
    for (const PluginTarget& plugin : PluginTargets()) {
      if (missed->family == plugin.family && missed->name == plugin.name) owner = &plugin;
    }
    if (owner != nullptr) {
      hints.push_back(Hint(*owner, target));
    } else {
      hints.push_back(
          absl::StrCat(missed->family, " '", missed->name, "' is not linked into ", target,
                       " and no plugin of //tools:all_plugins registers it: check "
                       "its spelling (the registry's message above lists what is linked)"));
    }
  }
  return hints;
}

}  // namespace vision::tools
