// //tools:plugin_options_protos (derived from //tools:all_plugins, what the config fuzzer links
// instead of the plugins) holds the options message of every plugin: linked with it and the hint
// table but no plugin, each options type the table names is in the descriptor pool.
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "tools/plugin_targets.h"

namespace vision::tools {
namespace {

TEST(PluginOptionsProtosTest, EveryPluginsOptionsTypeIsLinked) {
  ASSERT_FALSE(PluginTargets().empty());
  for (const PluginTarget& plugin : PluginTargets()) {
    EXPECT_NE(google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
                  plugin.options_type),
              nullptr)
        << plugin.family << " '" << plugin.name << "' of " << plugin.label << ": options type "
        << plugin.options_type << " is not in //tools:plugin_options_protos";
  }
}

}  // namespace
}  // namespace vision::tools
