// Checkpoints: written atomically (temporary file, fsync, rename, fsync of the directory) so a
// crash never leaves a half-written file under a checkpoint's name; the last K and the best
// kept; auto-resume from the newest one that loads, reporting and skipping corrupt ones.
#ifndef VISION_ENGINE_CHECKPOINT_H_
#define VISION_ENGINE_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "absl/status/statusor.h"
#include "engine/ema.h"

namespace vision::engine {

// Everything but tensors that a resumed run needs to continue exactly.
struct CheckpointMeta {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // current epoch
  int64_t batch_in_epoch = 0;  // batches of `epoch` already consumed by this rank
  bool has_best_metric = false;
  double best_metric = 0;
  int64_t best_metric_step = 0;
  std::vector<double> loss_scaler_state;
  int64_t consecutive_nonfinite = 0;
  std::string config_text;
  std::string config_fingerprint;
  // Hook::SaveState() of each of the config's hooks, in order (absent in older checkpoints).
  std::vector<std::string> hook_states;
};

// What to save and restore; optimizer and ema may be null.
struct TrainingState {
  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  ModelEma* ema = nullptr;
};

// Saves model, optimizer, EMA, the CPU RNG state and `meta` to `path` atomically.
absl::Status SaveCheckpoint(const std::string& path, const TrainingState& state,
                            const CheckpointMeta& meta);

// Reads only the metadata (to compare fingerprints before touching the model).
absl::StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& path);

// Restores everything SaveCheckpoint wrote. On error the state may be partly restored:
// load into a fresh state or abort.
absl::Status LoadCheckpoint(const std::string& path, const TrainingState& state,
                            CheckpointMeta* meta);

// Manages `<dir>/checkpoint_<step>.pt` and `<dir>/best.pt`.
class CheckpointManager {
 public:
  CheckpointManager(std::string dir, int keep_last, bool keep_best);

  // Saves the checkpoint of `meta.step`; when `is_best`, also writes best.pt. Then removes
  // step checkpoints beyond the newest keep_last.
  absl::Status Save(const TrainingState& state, const CheckpointMeta& meta, bool is_best);

  // Step checkpoints, newest first.
  std::vector<std::string> List() const;

  // Restores the newest checkpoint that loads completely. Each one that does not (truncated,
  // corrupt) is reported through `warnings` and the next older one is tried. `accept` sees
  // the metadata first; its error is returned at once (a config mismatch is no corruption).
  // nullopt when there is no checkpoint, or when none of them could be opened at all (a
  // crash cut the only one short: nothing was loaded into `state`; they are renamed to
  // *.corrupt and reported through `warnings`); an error when there are some but none loads
  // after one of them was partly loaded.
  absl::StatusOr<std::optional<CheckpointMeta>> RestoreLatest(
      const TrainingState& state,
      const std::function<absl::Status(const std::string& path, const CheckpointMeta&)>& accept,
      std::vector<std::string>* warnings) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int keep_last_;
  bool keep_best_;
};

}  // namespace vision::engine

#endif  // VISION_ENGINE_CHECKPOINT_H_
