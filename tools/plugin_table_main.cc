// Writes tools/plugin_targets' table (PluginTargets()) from what this binary registers: it links
// //tools:all_plugins, and each plugin's registration carries its own label and options type
// (VISION_REGISTER_PLUGIN, vision_plugin), so the table has no hand-written row.
//
//   plugin_table_main OUTPUT.cc
//
// Fails, writing nothing, when a registration was not compiled by vision_plugin (no label).
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/plugin_catalog.h"

namespace {

std::string Quoted(const std::string& text) {
  return absl::StrCat("\"", absl::CEscape(text), "\"");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.cc\n", argv[0]);
    return 2;
  }
  std::string rows;
  for (const vision::core::FamilyRegistrations& family : vision::core::RegisteredPlugins()) {
    for (const vision::core::Registration& plugin : family.plugins) {
      if (plugin.label.empty() || plugin.options_type.empty()) {
        std::fprintf(stderr,
                     "plugin_table_main: %s '%s' (registered at %s) has no Bazel label: build "
                     "the library that registers it with vision_plugin (core/plugin.bzl), not "
                     "cc_library\n",
                     family.family.c_str(), plugin.name.c_str(), plugin.site.c_str());
        return 1;
      }
      absl::StrAppend(&rows, "      {", Quoted(family.family), ", ", Quoted(plugin.name), ", ",
                      Quoted(plugin.options_type), ", ", Quoted(plugin.label), "},\n");
    }
  }
  const std::string text = absl::StrCat(
      "// Written by //tools:plugin_table_main from the registrations of //tools:all_plugins.\n"
      "#include \"tools/plugin_targets.h\"\n\n"
      "namespace vision::tools {\n\n"
      "const std::vector<PluginTarget>& PluginTargets() {\n"
      "  static const auto* targets = new std::vector<PluginTarget>{\n",
      rows,
      "  };\n"
      "  return *targets;\n"
      "}\n\n"
      "}  // namespace vision::tools\n");
  std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "plugin_table_main: could not write %s\n", argv[1]);
    return 1;
  }
  return 0;
}
