# What the recipe trajectory tests (models/*/trajectory_test.sh) share: running the trainer for
# one comparison. Sourced after tools/testing/expect.sh; reads the caller's t (the test's
# directory, holding recipe.pbtxt), steps, trainer and launcher.

# trajectory_run <processes> <output dir> [trainer flags before the batch and checkpoint
# overrides]: the trainer at a global batch of 4, a checkpoint at every step, its output in
# <output dir>.log; fails the test unless it finished all ${steps} steps.
trajectory_run() {
  local nproc="$1" out="$2"
  local args=(--config="${t}/recipe.pbtxt" "${@:3}"
              --override="train_data { loader { batch_size: $((4 / nproc)) } }"
              --override="checkpoint { output_dir: \"${out}\" every_n_steps: 1 keep_last: ${steps} }")
  if ((nproc == 1)); then
    "${trainer}" "${args[@]}" >"${out}.log" 2>&1 || { cat "${out}.log"; fail "the trainer failed"; }
  else
    "${launcher}" --nproc_per_node="${nproc}" --master_port=0 -- "${trainer}" "${args[@]}" \
      >"${out}.log" 2>&1 || { cat "${out}.log"; fail "the trainer failed under the launcher"; }
  fi
  expect_grep "step ${steps}/${steps}" "${out}.log"
}
