# What every model's quick start does, sourced by tools/quickstart*.sh:
#   run_quickstart <model dir under models/> <run dir> <generator under //tools> <data dir> \
#     [generator arguments...] -- [trainer arguments...]
# installs what is missing (tools/setup.sh), builds once, writes the seeded synthetic dataset if
# it is not complete, trains through //models/<model>:train_quickstart, then evaluates the best
# checkpoint with drawings of a few held-out images in <run dir>/predictions. The trainer
# arguments (e.g. --override='train { max_steps: 100 }') go to the evaluation too.
run_quickstart() {
  local model="$1" run="$2" generator="$3" data="$4"
  shift 4
  local generator_args=()
  while (($#)) && [[ "$1" != "--" ]]; do
    generator_args+=("$1")
    shift
  done
  (($#)) && shift

  bash tools/setup.sh
  # One build for everything below, so the `bazel run`s only start what is built.
  bazel build "//models/${model}:train_quickstart" "//tools:${generator}" //tools:eval

  if [[ ! -f "${data}/.complete" ]]; then
    rm -rf "${data}"
    bazel run "//tools:${generator}" -- --output_dir="${PWD}/${data}" "${generator_args[@]}"
    touch "${data}/.complete"
  fi

  # The config's data root and output directory are relative: under `bazel run` they mean this
  # directory (BUILD_WORKSPACE_DIRECTORY), as --config does for //tools:eval.
  bazel run "//models/${model}:train_quickstart" -- "$@"

  # Predictions over the ground truth for a handful of held-out images.
  bazel run //tools:eval -- --config="models/${model}/configs/quickstart.pbtxt" \
    --checkpoint="${run}/best.pt" --output_dir="${run}/predictions" --max_images=8 "$@"
}
