"""What is derived from //tools:all_plugins, so that adding a plugin there is the only edit.

  plugin_configs         the recipes every plugin ships (vision_plugin's `configs`), for
                         //tools:registration_test, which dry-runs each;
  plugin_manifest        the labels of every vision_plugin library, for registration_test,
                         which checks that each registers at least one plugin;
  plugin_options_protos  every cc_proto_library the plugins depend on, as one CcInfo: the
                         options messages a config names, for the config fuzzer, which parses
                         configs as tools/train does without linking LibTorch;
  plugin_table           the hint table of tools/plugin_targets.h, written by running a binary
                         that links the plugins (built for the target, not the host, so the
                         plugins are compiled once for both).

The first three walk the `deps` graph with an aspect: nothing is compiled or linked for them
beyond the protos themselves.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("//core:plugin.bzl", "VisionPluginInfo")

_BundleInfo = provider(
    doc = "What an aspect walk of a plugin bundle found.",
    fields = {
        "configs": "depset of recipe files",
        "labels": "depset of the labels of the vision_plugin libraries",
        "protos": "list of CcInfo of the cc_proto_library targets below",
        "proto_owners": "depset of the labels owning the generated code's linker inputs",
    },
)

def _bundle_aspect_impl(target, ctx):
    configs = []
    labels = []
    protos = []
    owners = []
    if VisionPluginInfo in target:
        configs.append(target[VisionPluginInfo].configs)
        labels.append(depset([target[VisionPluginInfo].label]))
    if ctx.rule.kind == "cc_proto_library" and CcInfo in target:
        protos.append(target[CcInfo])
        owners.append(depset([target.label] + [d.label for d in ctx.rule.attr.deps]))
    for dep in getattr(ctx.rule.attr, "deps", []):
        if _BundleInfo in dep:
            configs.append(dep[_BundleInfo].configs)
            labels.append(dep[_BundleInfo].labels)
            owners.append(dep[_BundleInfo].proto_owners)
            protos.extend(dep[_BundleInfo].protos)
    return [_BundleInfo(
        configs = depset(transitive = configs),
        labels = depset(transitive = labels),
        proto_owners = depset(transitive = owners),
        protos = [cc_common.merge_cc_infos(cc_infos = protos)] if protos else [],
    )]

_bundle_aspect = aspect(
    implementation = _bundle_aspect_impl,
    attr_aspects = ["deps"],
)

def _plugin_configs_impl(ctx):
    configs = depset(transitive = [p[_BundleInfo].configs for p in ctx.attr.plugins])
    return [DefaultInfo(files = configs, runfiles = ctx.runfiles(transitive_files = configs))]

plugin_configs = rule(
    implementation = _plugin_configs_impl,
    doc = "The recipes shipped by every vision_plugin below `plugins`.",
    attrs = {"plugins": attr.label_list(aspects = [_bundle_aspect], mandatory = True)},
)

def _plugin_manifest_impl(ctx):
    labels = depset(transitive = [p[_BundleInfo].labels for p in ctx.attr.plugins])
    out = ctx.actions.declare_file(ctx.attr.name + ".txt")
    ctx.actions.write(out, "".join([label + "\n" for label in sorted(labels.to_list())]))
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

plugin_manifest = rule(
    implementation = _plugin_manifest_impl,
    doc = "A text file naming every vision_plugin library below `plugins`, one label a line.",
    attrs = {"plugins": attr.label_list(aspects = [_bundle_aspect], mandatory = True)},
)

def _plugin_options_protos_impl(ctx):
    infos = []
    owners = []
    for p in ctx.attr.plugins:
        infos.extend(p[_BundleInfo].protos)
        owners.append(p[_BundleInfo].proto_owners)
    merged = cc_common.merge_cc_infos(cc_infos = infos)
    owners = {str(label): True for label in depset(transitive = owners).to_list()}

    # Nothing calls into an options message's generated code: its descriptor is registered by a
    # static initialiser, which the linker drops with the unreferenced object unless the library
    # is linked whole (alwayslink), as a plugin is.
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    inputs = []
    for linker_input in merged.linking_context.linker_inputs.to_list():
        if str(linker_input.owner) not in owners:
            inputs.append(linker_input)
            continue
        libraries = [
            cc_common.create_library_to_link(
                actions = ctx.actions,
                feature_configuration = features,
                cc_toolchain = cc_toolchain,
                static_library = library.static_library,
                pic_static_library = library.pic_static_library,
                alwayslink = True,
            )
            for library in linker_input.libraries
            if library.static_library or library.pic_static_library
        ]
        inputs.append(cc_common.create_linker_input(
            owner = linker_input.owner,
            libraries = depset(libraries),
            user_link_flags = depset(linker_input.user_link_flags),
        ))

    # The same inputs in the same (link) order, the options' code now linked whole.
    linking = cc_common.create_linking_context(
        linker_inputs = depset(inputs, order = "topological"),
    )
    return [CcInfo(compilation_context = merged.compilation_context, linking_context = linking)]

plugin_options_protos = rule(
    implementation = _plugin_options_protos_impl,
    doc = "Every cc_proto_library below `plugins`, linked whole, as one dependency (a CcInfo).",
    attrs = {
        "plugins": attr.label_list(aspects = [_bundle_aspect], mandatory = True),
        "_cc_toolchain": attr.label(
            default = Label("@bazel_tools//tools/cpp:current_cc_toolchain"),
        ),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

def _plugin_table_impl(ctx):
    out = ctx.actions.declare_file(ctx.attr.name + ".cc")
    ctx.actions.run(
        executable = ctx.attr.tool[DefaultInfo].files_to_run,
        arguments = [out.path],
        outputs = [out],
        mnemonic = "PluginTable",
        progress_message = "Writing the plugin table %s" % out.short_path,
    )
    return [DefaultInfo(files = depset([out]))]

plugin_table = rule(
    implementation = _plugin_table_impl,
    doc = "A .cc defining PluginTargets(), written by running `tool` (tools/plugin_table_main.cc).",
    attrs = {
        # cfg = "target": the tool links every plugin, and a host build would compile them all
        # a second time. The build machine runs what it builds (no cross-compiling here).
        "tool": attr.label(executable = True, cfg = "target", mandatory = True),
    },
)
