// Plugin registration: one line at the bottom of a plugin's .cc.
//
//   VISION_REGISTER_PLUGIN(ModelRegistry, "DBNet", DBNet, DBNetOptions);
//
// Every family's factory takes the plugin's options as google.protobuf.Any (the `options`
// field of a PluginSpec in the pipeline config) followed by the family's own arguments. The
// macro unpacks the Any into the plugin's options message (an empty Any gives the defaults,
// another message type is an InvalidArgument naming both types) and calls
//
//   static absl::StatusOr<std::unique_ptr<Impl>> Impl::Create(const Options&, Args...);
//
// Each family header (core/model.h, ...) declares its Registry alias; plugins are linked with
// the vision_plugin() Bazel macro (core/plugin.bzl), which forces alwayslink.
#ifndef VISION_CORE_PLUGIN_H_
#define VISION_CORE_PLUGIN_H_

#include <memory>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/registry.h"
#include "core/status_macros.h"
#include "google/protobuf/any.pb.h"

namespace vision::core {

// The registry of a family whose factories take (options, Args...).
template <typename Interface, typename... Args>
using PluginRegistry = Registry<Interface, const google::protobuf::Any&, Args...>;

namespace internal {

// Unpacks `any` into `options`: empty means defaults.
template <typename Options>
absl::Status UnpackOptions(const google::protobuf::Any& any, Options* options) {
  if (any.type_url().empty()) return absl::OkStatus();
  if (!any.template Is<Options>()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options: expected a message of type ", Options::descriptor()->full_name(), ", got '",
        any.type_url(), "'. Write them as options { [type.googleapis.com/",
        Options::descriptor()->full_name(), "] { ... } }"));
  }
  if (!any.UnpackTo(options)) {
    return absl::InvalidArgumentError(
        absl::StrCat("options: could not decode ", Options::descriptor()->full_name()));
  }
  return absl::OkStatus();
}

template <typename RegistryT, typename Impl, typename Options>
struct FactoryMaker;

template <typename Interface, typename... Args, typename Impl, typename Options>
struct FactoryMaker<Registry<Interface, const google::protobuf::Any&, Args...>, Impl, Options> {
  static_assert(std::is_base_of_v<Interface, Impl>,
                "a plugin class must derive from its family's interface");
  static auto Make() {
    return [](const google::protobuf::Any& any,
              Args... args) -> absl::StatusOr<std::unique_ptr<Interface>> {
      Options options;
      VISION_RETURN_IF_ERROR(UnpackOptions(any, &options));
      VISION_ASSIGN_OR_RETURN(std::unique_ptr<Impl> made, Impl::Create(options, args...));
      return std::unique_ptr<Interface>(std::move(made));
    };
  }
  static std::string OptionsType() { return std::string(Options::descriptor()->full_name()); }
};

}  // namespace internal
}  // namespace vision::core

// The Bazel label of the vision_plugin target compiling this file (core/plugin.bzl defines it),
// recorded with each registration so that tools can name the target that provides a plugin.
#ifndef VISION_PLUGIN_LABEL
#define VISION_PLUGIN_LABEL ""
#endif

#define VISION_PLUGIN_CONCAT_INNER(a, b) a##b
#define VISION_PLUGIN_CONCAT(a, b) VISION_PLUGIN_CONCAT_INNER(a, b)
#define VISION_PLUGIN_STRINGIFY_INNER(x) #x
#define VISION_PLUGIN_STRINGIFY(x) VISION_PLUGIN_STRINGIFY_INNER(x)

// Registers `Impl` (which must derive from the family's interface) under `name`.
#define VISION_REGISTER_PLUGIN(RegistryT, name, Impl, Options)                            \
  static_assert(std::is_base_of_v<RegistryT::InterfaceType, Impl>,                        \
                #Impl " does not implement the interface of " #RegistryT);                \
  [[maybe_unused]] static const bool VISION_PLUGIN_CONCAT(vision_plugin_registered_,      \
                                                          __COUNTER__) =                  \
      RegistryT::Get().Register(                                                          \
          name, ::vision::core::internal::FactoryMaker<RegistryT, Impl, Options>::Make(), \
          __FILE__ ":" VISION_PLUGIN_STRINGIFY(__LINE__), VISION_PLUGIN_LABEL,            \
          &::vision::core::internal::FactoryMaker<RegistryT, Impl, Options>::OptionsType)

#endif  // VISION_CORE_PLUGIN_H_
