"""vision_training_target: a recipe (a config) plus exactly the plugins it names, as targets.

As MediaPipe makes a graph plus its calculators a binary: `bazel run //models/dbnet:train_quickstart
-- --override='seed: 7'` trains with models/dbnet/configs/quickstart.pbtxt, linking the trainer's
main (//tools:train_main) with the listed plugins only, and `<name>_dry_run_test` checks at
`bazel test` time that those plugins are all the config needs.

It lives in tools/, not beside vision_plugin in core/plugin.bzl, because it depends on the
drivers (//tools:train_main, //distributed/launch) and core depends on no driver.
"""

# The main repository's directory in the runfiles tree: workspace(name) in WORKSPACE.
_WORKSPACE = "vision"

def _shell_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"

def vision_training_target(
        name,
        config,
        deps,
        bases = [],
        nproc_per_node = 1,
        launcher_args = [],
        tags = [],
        visibility = None):
    """Makes `name` (runnable), `name`_bin (the trainer) and `name`_dry_run_test.

    Args:
      name: the runnable target, by convention train_<config name>.
      config: the pipeline config (.pbtxt label); found in runfiles, while relative paths inside
        it (data roots, output directories) resolve against the directory `bazel run` was
        started from (BUILD_WORKSPACE_DIRECTORY).
      deps: the plugin targets the config names (model, backbone, datasets, augmentations,
        optimizer, schedule, strategy, evaluator); the dry-run test says which one is missing.
      bases: the configs `config` builds on through `base:` (its base, the base's base...), so
        that they are in runfiles beside it; the dry-run test says when one is missing.
      nproc_per_node: > 1 runs the trainer under //distributed/launch with that many processes.
      launcher_args: more launcher flags (e.g. "--master_port=0"); needs nproc_per_node > 1.
      tags: for every generated target (e.g. "manual").
      visibility: of the runnable target and the trainer binary.
    """
    if nproc_per_node < 1:
        fail("%s: nproc_per_node must be >= 1, got %d" % (name, nproc_per_node))
    if launcher_args and nproc_per_node == 1:
        fail("%s: launcher_args %s need nproc_per_node > 1 (one process runs no launcher)" %
             (name, launcher_args))
    label = "//%s:%s" % (native.package_name(), name)
    trainer = name + "_bin"
    launcher = "//tools:launch"

    native.cc_binary(
        name = trainer,
        deps = ["//tools:train_main"] + deps,
        tags = tags,
        visibility = visibility,
    )

    # The script's variables, then the shared body. `$$` is a literal `$` in a genrule command.
    header = [
        "#!/usr/bin/env bash",
        "# Made by vision_training_target (tools/training.bzl) for %s." % label,
        "target=%s" % _shell_quote(label),
        "workspace=%s" % _shell_quote(_WORKSPACE),
        "trainer='$(rootpath :%s)'" % trainer,
        "config='$(rootpath %s)'" % config,
        "nproc_per_node=%d" % nproc_per_node,
        "launcher='$(rootpath %s)'" % launcher,
        "launcher_args=(%s)" % " ".join([
            _shell_quote(a).replace("$", "$$")
            for a in launcher_args
        ]),
    ]
    native.genrule(
        name = name + "_script",
        srcs = [
            ":" + trainer,
            config,
            launcher,
            "//tools:training_target_body.sh",
        ],
        outs = [name + ".sh"],
        cmd = "(printf '%%s\\n' %s; cat $(location //tools:training_target_body.sh)) > $@" %
              " ".join([_shell_quote(line) for line in header]),
        tags = tags,
        visibility = ["//visibility:private"],
    )
    native.sh_binary(
        name = name,
        srcs = [name + ".sh"],
        data = [":" + trainer, config] + bases + ([launcher] if nproc_per_node > 1 else []),
        tags = tags,
        visibility = visibility,
    )
    native.cc_test(
        name = name + "_dry_run_test",
        size = "small",
        args = [
            "--config=$(rootpath %s)" % config,
            "--target=" + label,
            "--nproc_per_node=%d" % nproc_per_node,
        ],
        data = [config] + bases,
        deps = ["//tools:config_dry_run_main"] + deps,
        tags = tags,
    )
