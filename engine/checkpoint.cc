#include "engine/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/atomic_output.h"
#include "core/status_macros.h"

namespace vision::engine {
namespace {

// The CUDA device a model trains on, if any (its first parameter's).
std::optional<c10::Device> CudaDeviceOf(torch::nn::Module& model) {
  for (const at::Tensor& p : model.parameters()) {
    if (p.is_cuda()) return p.device();
    break;
  }
  return std::nullopt;
}

namespace fs = std::filesystem;

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " '", path, "': ", std::strerror(errno)));
}

void WriteMeta(torch::serialize::OutputArchive& archive, const CheckpointMeta& m) {
  archive.write("meta/step", c10::IValue(m.step));
  archive.write("meta/epoch", c10::IValue(m.epoch));
  archive.write("meta/batch_in_epoch", c10::IValue(m.batch_in_epoch));
  archive.write("meta/has_best_metric", c10::IValue(m.has_best_metric));
  archive.write("meta/best_metric", c10::IValue(m.best_metric));
  archive.write("meta/best_metric_step", c10::IValue(m.best_metric_step));
  archive.write("meta/loss_scaler_state", c10::IValue(m.loss_scaler_state));
  archive.write("meta/consecutive_nonfinite", c10::IValue(m.consecutive_nonfinite));
  archive.write("meta/config_text", c10::IValue(m.config_text));
  archive.write("meta/config_fingerprint", c10::IValue(m.config_fingerprint));
  c10::List<std::string> hook_states;
  for (const std::string& state : m.hook_states) hook_states.push_back(state);
  archive.write("meta/hook_states", c10::IValue(hook_states));
}

CheckpointMeta ReadMeta(torch::serialize::InputArchive& archive) {
  CheckpointMeta m;
  c10::IValue v;
  archive.read("meta/step", v);
  m.step = v.toInt();
  archive.read("meta/epoch", v);
  m.epoch = v.toInt();
  archive.read("meta/batch_in_epoch", v);
  m.batch_in_epoch = v.toInt();
  archive.read("meta/has_best_metric", v);
  m.has_best_metric = v.toBool();
  archive.read("meta/best_metric", v);
  m.best_metric = v.toDouble();
  if (archive.try_read("meta/best_metric_step", v)) m.best_metric_step = v.toInt();
  archive.read("meta/loss_scaler_state", v);
  m.loss_scaler_state = v.toDoubleVector();
  archive.read("meta/consecutive_nonfinite", v);
  m.consecutive_nonfinite = v.toInt();
  archive.read("meta/config_text", v);
  m.config_text = v.toStringRef();
  archive.read("meta/config_fingerprint", v);
  m.config_fingerprint = v.toStringRef();
  if (archive.try_read("meta/hook_states", v)) {
    for (const c10::IValue& state : v.toListRef()) m.hook_states.push_back(state.toStringRef());
  }
  return m;
}

int64_t StepOf(const fs::path& path) {
  const std::string name = path.filename().string();
  long long step = -1;
  char tail[8] = {0};
  if (std::sscanf(name.c_str(), "checkpoint_%lld.%3s", &step, tail) == 2 &&
      std::string(tail) == "pt") {
    return step;
  }
  return -1;
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& path, const TrainingState& state,
                            const CheckpointMeta& meta) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  try {
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model_archive;
    state.model->save(model_archive);
    archive.write("model", model_archive);
    if (state.optimizer != nullptr) {
      torch::serialize::OutputArchive optimizer_archive;
      state.optimizer->save(optimizer_archive);
      archive.write("optimizer", optimizer_archive);
    }
    if (state.ema != nullptr) {
      for (const auto& [name, value] : state.ema->values()) archive.write("ema/" + name, value);
    }
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      archive.write("rng/cpu", gen.get_state());
    }
    if (const std::optional<c10::Device> cuda = CudaDeviceOf(*state.model)) {
      // Dropout and random augmentations on the GPU draw from this device's generator.
      at::Generator gen = at::globalContext().defaultGenerator(*cuda);
      std::lock_guard<std::mutex> lock(gen.mutex());
      archive.write("rng/cuda", gen.get_state());
    }
    WriteMeta(archive, meta);

    std::FILE* file = std::fopen(tmp.c_str(), "wb");
    if (file == nullptr) return ErrnoError("cannot create checkpoint", tmp);
    bool write_ok = true;
    archive.save_to([&](const void* data, size_t size) -> size_t {
      if (std::fwrite(data, 1, size, file) != size) write_ok = false;
      return size;
    });
    write_ok = write_ok && std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
    std::fclose(file);
    if (!write_ok) {
      const absl::Status error = ErrnoError("cannot write checkpoint", tmp);
      std::remove(tmp.c_str());
      return error;
    }
  } catch (const c10::Error& e) {
    std::remove(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("saving checkpoint '", path, "': ", e.what_without_backtrace()));
  }
  if (absl::Status status = core::RenameDurably(tmp, path); !status.ok()) {
    std::remove(tmp.c_str());
    return absl::Status(status.code(),
                        absl::StrCat("cannot put checkpoint into place: ", status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    return ReadMeta(archive);
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path,
                                            "' is unreadable (truncated or corrupt?): ",
                                            e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "' is unreadable: ", e.what()));
  }
}

absl::Status LoadCheckpoint(const std::string& path, const TrainingState& state,
                            CheckpointMeta* meta) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    CheckpointMeta m = ReadMeta(archive);
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    state.model->load(model_archive);
    if (state.optimizer != nullptr) {
      torch::serialize::InputArchive optimizer_archive;
      archive.read("optimizer", optimizer_archive);
      state.optimizer->load(optimizer_archive);
    }
    if (state.ema != nullptr) {
      for (auto& [name, value] : state.ema->mutable_values()) {
        at::Tensor saved;
        archive.read("ema/" + name, saved);
        value.copy_(saved);
      }
    }
    at::Tensor rng;
    archive.read("rng/cpu", rng);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
    }
    // A run moved between CPU and GPU resumes without the other kind's generator state.
    at::Tensor cuda_rng;
    const std::optional<c10::Device> cuda = CudaDeviceOf(*state.model);
    if (cuda.has_value() && archive.try_read("rng/cuda", cuda_rng)) {
      at::Generator cuda_gen = at::globalContext().defaultGenerator(*cuda);
      std::lock_guard<std::mutex> lock(cuda_gen.mutex());
      cuda_gen.set_state(cuda_rng);
    }
    if (meta != nullptr) *meta = std::move(m);
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat("cannot load checkpoint '", path,
                                            "': ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("cannot load checkpoint '", path, "': ", e.what()));
  }
  return absl::OkStatus();
}

CheckpointManager::CheckpointManager(std::string dir, int keep_last, bool keep_best)
    : dir_(std::move(dir)), keep_last_(std::max(1, keep_last)), keep_best_(keep_best) {}

absl::Status CheckpointManager::Save(const TrainingState& state, const CheckpointMeta& meta,
                                     bool is_best) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create checkpoint directory '", dir_, "': ", ec.message()));
  }
  const std::string path = (fs::path(dir_) / absl::StrFormat("checkpoint_%d.pt", meta.step)).string();
  VISION_RETURN_IF_ERROR(SaveCheckpoint(path, state, meta));
  if (is_best && keep_best_) {
    VISION_RETURN_IF_ERROR(SaveCheckpoint((fs::path(dir_) / "best.pt").string(), state, meta));
  }
  const std::vector<std::string> all = List();
  for (size_t i = keep_last_; i < all.size(); ++i) fs::remove(all[i], ec);
  return absl::OkStatus();
}

std::vector<std::string> CheckpointManager::List() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const int64_t step = StepOf(entry.path());
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

absl::StatusOr<std::optional<CheckpointMeta>> CheckpointManager::RestoreLatest(
    const TrainingState& state,
    const std::function<absl::Status(const std::string&, const CheckpointMeta&)>& accept,
    std::vector<std::string>* warnings) const {
  const std::vector<std::string> paths = List();
  // Whether a failed load may have written part of a checkpoint into `state`.
  bool state_touched = false;
  for (const std::string& path : paths) {
    absl::StatusOr<CheckpointMeta> meta = ReadCheckpointMeta(path);
    if (meta.ok()) {
      VISION_RETURN_IF_ERROR(accept(path, *meta));
      CheckpointMeta loaded;
      absl::Status s = LoadCheckpoint(path, state, &loaded);
      if (s.ok()) return std::optional<CheckpointMeta>(std::move(loaded));
      meta = s;
      state_touched = true;
    }
    warnings->push_back(absl::StrCat(meta.status().message(), "; trying an older checkpoint"));
  }
  if (paths.empty()) return std::optional<CheckpointMeta>();
  if (!state_touched) {
    // None could even be opened (the newest and only one cut short by a crash, typically):
    // nothing was loaded, so training starts from step 0 as the older states are gone. The
    // unreadable files are kept aside, under names that are neither loaded nor pruned.
    for (const std::string& path : paths) {
      std::error_code ec;  // another rank may have moved it already
      fs::rename(path, path + ".corrupt", ec);
    }
    warnings->push_back(absl::StrCat(
        "none of the ", paths.size(), " checkpoints in '", dir_,
        "' could be opened; they are kept as *.corrupt and training starts from step 0"));
    return std::optional<CheckpointMeta>();
  }
  return absl::DataLossError(absl::StrCat(
      "none of the ", paths.size(), " checkpoints in '", dir_,
      "' loads; move them away to start from scratch, or restore a good one"));
}

}  // namespace vision::engine
