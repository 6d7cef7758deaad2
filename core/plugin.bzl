"""vision_plugin: the one way to build a plugin library.

A plugin's object file is referenced by nothing but its static registration, so without
alwayslink the linker drops it and the plugin silently vanishes from the registry.

The macro also tells the plugin where it comes from, so that nothing else has to:
  - its own label, compiled in as VISION_PLUGIN_LABEL: VISION_REGISTER_PLUGIN (core/plugin.h)
    records it beside the options type, and //tools:plugin_targets_table is written from
    what //tools:all_plugins registers;
  - the recipes it ships (`configs`), which //tools:shipped_configs collects from every plugin
    of //tools:all_plugins (tools/plugin_bundle.bzl) for //tools:registration_test, which also
    checks that every such library registers something (//tools:plugin_manifest).
"""

VisionPluginInfo = provider(
    doc = "What a vision_plugin ships besides its code.",
    fields = {
        "label": "the plugin library's label, as VISION_PLUGIN_LABEL spells it",
        "configs": "depset of the recipe files (.pbtxt) the plugin ships",
    },
)

def _plugin_info_impl(ctx):
    return [
        # An empty CcInfo lets the cc_library list this target in its deps: the configs then
        # ride along the dependency graph without being inputs of any compile or link.
        CcInfo(),
        VisionPluginInfo(label = ctx.attr.plugin_label, configs = depset(ctx.files.configs)),
    ]

_plugin_info = rule(
    implementation = _plugin_info_impl,
    attrs = {
        "configs": attr.label_list(allow_files = [".pbtxt"]),
        "plugin_label": attr.string(mandatory = True),
    },
)

def _label_of(name):
    """The plugin's label as a user writes it: //models/dbnet, not //models/dbnet:dbnet."""
    package = native.package_name()
    repository = native.repository_name()
    prefix = "" if repository == "@" else repository
    if package.split("/")[-1] == name:
        return "%s//%s" % (prefix, package)
    return "%s//%s:%s" % (prefix, package, name)

def vision_plugin(name, srcs = [], hdrs = [], deps = [], configs = [], local_defines = [], **kwargs):
    """A cc_library whose plugins register themselves (alwayslink) and know their label.

    Args:
      name: the library, the target a user adds to a binary's deps.
      srcs, hdrs, deps: as for cc_library.
      configs: the recipes (.pbtxt files or filegroups) the plugin ships; every recipe of a
        plugin in //tools:all_plugins is dry-run by //tools:registration_test.
      local_defines: as for cc_library (VISION_PLUGIN_LABEL is added).
      **kwargs: passed to cc_library.
    """
    if "alwayslink" in kwargs:
        fail("vision_plugin sets alwayslink = 1 itself; remove it from %s" % name)
    label = _label_of(name)
    info = name + "_plugin_info"
    _plugin_info(
        name = info,
        configs = configs,
        plugin_label = label,
        visibility = ["//visibility:private"],
        testonly = kwargs.get("testonly", False),
    )

    # One Bourne-shell token (Bazel tokenises defines): the value keeps its double quotes.
    label_define = 'VISION_PLUGIN_LABEL=\\"%s\\"' % label
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["//core:plugin", ":" + info],
        local_defines = local_defines + [label_define],
        alwayslink = 1,
        **kwargs
    )
