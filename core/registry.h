// The registry core: one template serves every plugin family.
//
// A family is a Registry<Interface, Args...>; a plugin registers a factory under a name with
// one line at the bottom of its .cc (see core/plugin.h for the macro and the family aliases).
// Modelled on MediaPipe's registration.h and c10's Registry.h:
//  - the registry is a function-local singleton created on first use and never destroyed,
//    so registration from static initialisers is safe in any order;
//  - a duplicate name stops the program at start-up, naming both registration sites;
//  - a lookup miss is NotFound listing every registered name, with a "did you mean".
#ifndef VISION_CORE_REGISTRY_H_
#define VISION_CORE_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace vision::core {
namespace internal {

// Aborts the process: two plugins registered the same name in one family.
[[noreturn]] void DieOnDuplicate(absl::string_view family, absl::string_view name,
                                 absl::string_view first_site, absl::string_view second_site);

// "Unknown model 'DBNett'; did you mean 'DBNet'? Registered: DANet, DBNet, MaskRCNN", with
// the family and name attached as a payload (see UnknownPluginOf).
absl::Status UnknownName(absl::string_view family, absl::string_view name,
                         const std::vector<std::string>& registered);

}  // namespace internal

// The plugin a registry lookup missed, read from the status's payload rather than its text,
// which WithContext prefixes: lets a caller (the training targets' dry-run test) say which
// Bazel target would register it.
struct UnknownPlugin {
  std::string family;
  std::string name;
};
std::optional<UnknownPlugin> UnknownPluginOf(const absl::Status& status);

// Where one registered plugin comes from, for the tools that tell a user which Bazel target to
// link (tools/plugin_targets.h): filled by VISION_REGISTER_PLUGIN (core/plugin.h).
struct Registration {
  std::string name;          // the type a config names
  std::string site;          // "file:line" of the registration
  std::string label;         // the vision_plugin target that compiled it; empty outside one
  std::string options_type;  // full name of its options message; empty when it has none
};

// Edit distance used for the "did you mean" suggestion (case-insensitive).
int EditDistance(absl::string_view a, absl::string_view b);

template <typename Interface, typename... Args>
class Registry {
 public:
  using Product = std::unique_ptr<Interface>;
  using Factory = std::function<absl::StatusOr<Product>(Args...)>;

  using InterfaceType = Interface;

  // The family's singleton; Interface::kFamily names the family in messages ("model", ...).
  static Registry& Get() {
    static Registry* const registry = new Registry(std::string(Interface::kFamily));
    return *registry;
  }

  // Returns true so it can initialise a namespace-scope static. `site` is "file:line"; `label`
  // the Bazel target that compiled the registration; `options_type` returns the full name of
  // the plugin's options message (called late, after static initialisation).
  bool Register(const std::string& name, Factory factory, std::string site, std::string label = "",
                std::string (*options_type)() = nullptr) {
    absl::MutexLock lock(&mutex_);
    auto [it, inserted] =
        entries_.try_emplace(name, Entry{std::move(factory), site, std::move(label), options_type});
    if (!inserted) internal::DieOnDuplicate(family_, name, it->second.site, site);
    return true;
  }

  absl::StatusOr<Product> Create(absl::string_view name, Args... args) const {
    Factory factory;
    {
      absl::MutexLock lock(&mutex_);
      auto it = entries_.find(std::string(name));
      if (it == entries_.end()) return internal::UnknownName(family_, name, NamesLocked());
      factory = it->second.factory;
    }
    return factory(std::forward<Args>(args)...);
  }

  bool Contains(absl::string_view name) const {
    absl::MutexLock lock(&mutex_);
    return entries_.count(std::string(name)) > 0;
  }

  // Sorted registered names.
  std::vector<std::string> Names() const {
    absl::MutexLock lock(&mutex_);
    return NamesLocked();
  }

  // Every registration, sorted by name.
  std::vector<Registration> Registrations() const {
    absl::MutexLock lock(&mutex_);
    std::vector<Registration> out;
    out.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) {
      out.push_back({name, entry.site, entry.label,
                     entry.options_type == nullptr ? std::string() : entry.options_type()});
    }
    return out;
  }

  const std::string& family() const { return family_; }

 private:
  struct Entry {
    Factory factory;
    std::string site;
    std::string label;
    std::string (*options_type)();
  };

  explicit Registry(std::string family) : family_(std::move(family)) {}

  std::vector<std::string> NamesLocked() const {
    std::vector<std::string> names;
    names.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) names.push_back(name);
    return names;
  }

  const std::string family_;
  mutable absl::Mutex mutex_;
  std::map<std::string, Entry> entries_;
};

}  // namespace vision::core

#endif  // VISION_CORE_REGISTRY_H_
