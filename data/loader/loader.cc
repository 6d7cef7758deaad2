#include "data/loader/loader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "core/torch_guard.h"
#include "data/loader/aspect_ratio_groups.h"

namespace vision::data {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::string SampleName(const core::Sample& sample, int64_t index) {
  if (!sample.image_path.empty()) return sample.image_path;
  if (!sample.id.empty()) return sample.id;
  return absl::StrCat("sample ", index);
}

// An HxWx3 image into the [3, H', W'] float slice `out` (H <= H', W <= W'): 8-bit BGR becomes
// RGB in [0, 1], float images (after Normalize: RGB) are taken as they are. cv::split writes
// the channel planes straight into the tensor's memory (Mat headers of the right size and type
// are not reallocated), with no HWC -> CHW copy through ATen.
void CopyImage(const cv::Mat& image, const at::Tensor& out) {
  cv::Mat source = image;
  if (image.depth() == CV_8U) {
    cv::Mat rgb;
    cv::cvtColor(image, rgb, cv::COLOR_BGR2RGB);
    rgb.convertTo(source, CV_32F, 1.0 / 255.0);
  } else if (image.depth() != CV_32F) {
    image.convertTo(source, CV_32F);
  }
  const size_t row_bytes = static_cast<size_t>(out.stride(1)) * sizeof(float);
  cv::Mat planes[3];
  for (int c = 0; c < 3; ++c) {
    planes[c] = cv::Mat(source.rows, source.cols, CV_32F, out[c].data_ptr<float>(), row_bytes);
  }
  cv::split(source, planes);
}

// The tensor type a target map is stacked as: bytes stay bytes (binary maps: a quarter of the
// memory and of the host-to-device copy; the model converts), everything else is float.
at::ScalarType TargetType(const cv::Mat& map) {
  return map.depth() == CV_8U ? at::kByte : at::kFloat;
}

// A single-channel map into the [H', W'] slice `out` of type TargetType(map).
void CopyMap(const cv::Mat& map, const at::Tensor& out) {
  const int type = out.scalar_type() == at::kByte ? CV_8U : CV_32F;
  cv::Mat destination(map.rows, map.cols, type, out.data_ptr(),
                      static_cast<size_t>(out.stride(0)) * out.element_size());
  if (map.type() == type) {
    map.copyTo(destination);
  } else {
    map.convertTo(destination, type);
  }
}

}  // namespace

BatchMemoryPool::~BatchMemoryPool() {
  for (const auto& [capacity, data] : free_) std::free(data);
}

at::Tensor BatchMemoryPool::NewTensor(at::IntArrayRef sizes, at::ScalarType type, bool zero) {
  constexpr size_t kAlignment = 64;  // as LibTorch's CPU allocator
  size_t bytes = c10::elementSize(type);
  for (int64_t size : sizes) bytes *= static_cast<size_t>(size);
  void* data = nullptr;
  size_t capacity = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first / 2 <= bytes) {
      capacity = it->first;
      data = it->second;
      free_.erase(it);
    }
  }
  if (data == nullptr) {
    capacity = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    data = std::aligned_alloc(kAlignment, capacity);
    if (data == nullptr) throw std::bad_alloc();
  }
  if (zero) std::memset(data, 0, bytes);
  std::shared_ptr<BatchMemoryPool> self = shared_from_this();
  return at::from_blob(
      data, sizes, [self, capacity](void* p) { self->Release(p, capacity); },
      at::TensorOptions().dtype(type));
}

void BatchMemoryPool::Release(void* data, size_t capacity) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int>(free_.size()) < max_free_buffers_) {
      free_.emplace(capacity, data);
      return;
    }
  }
  std::free(data);
}

int BatchMemoryPool::free_buffers() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(free_.size());
}

int64_t NumBatches(const LoaderOptions& options, int64_t num_samples) {
  const int64_t b = options.batch_size;
  const bool whole = options.drop_last || options.aspect_ratio_group_factor != -1;
  return whole ? num_samples / b : (num_samples + b - 1) / b;
}

uint64_t SampleSeed(uint64_t seed, int64_t epoch, int64_t index) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(epoch)) ^
                    static_cast<uint64_t>(index));
}

absl::StatusOr<core::Sample> LoadSample(const core::Dataset& dataset,
                                        const std::vector<const core::Augmentation*>& augmentations,
                                        const core::TargetGenerator* targets, int64_t index,
                                        uint64_t seed, int64_t epoch, bool keep_ground_truth) {
  VISION_ASSIGN_OR_RETURN(core::Sample sample, dataset.Load(index));
  if (keep_ground_truth) {
    VISION_ASSIGN_OR_RETURN(core::Sample truth, dataset.GroundTruth(index, sample));
    sample.ground_truth = std::make_shared<const core::Sample>(std::move(truth));
  }
  std::mt19937_64 rng(SampleSeed(seed, epoch, index));
  try {
    for (const core::Augmentation* augmentation : augmentations) {
      VISION_RETURN_IF_ERROR(
          core::WithContext(SampleName(sample, index), augmentation->Apply(&sample, rng)));
    }
    if (targets != nullptr) {
      VISION_RETURN_IF_ERROR(
          core::WithContext(absl::StrCat(SampleName(sample, index), ": target generation"),
                            targets->Generate(&sample)));
    }
  } catch (const cv::Exception& e) {
    return absl::InternalError(absl::StrCat(SampleName(sample, index), ": OpenCV: ", e.what()));
  }
  return sample;
}

absl::StatusOr<core::Batch> Collate(std::vector<core::Sample> samples,
                                    const CollateOptions& options) {
  if (samples.empty()) return absl::InvalidArgumentError("cannot collate an empty batch");
  const int64_t n = static_cast<int64_t>(samples.size());
  int height = 0, width = 0;
  for (int64_t i = 0; i < n; ++i) {
    core::Sample& s = samples[i];
    if (s.image.empty() || s.image.channels() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(SampleName(s, i), ": expected a 3-channel image, got ", s.image.channels()));
    }
    height = std::max(height, s.image.rows);
    width = std::max(width, s.image.cols);
    // Label maps travel with the dense targets (a header, no copy), padded with the ignore label.
    if (s.semantic.empty() != samples.front().semantic.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          SampleName(s, i), s.semantic.empty() ? " has no" : " has a",
          " label map where the batch's first sample ",
          s.semantic.empty() ? "has one" : "has none", "; a dataset must give every sample one or none"));
    }
    if (!s.semantic.empty()) {
      if (s.targets.count(core::kSemanticTarget) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            SampleName(s, i), ": the target generator made a map named '", core::kSemanticTarget,
            "', the name of the label map; rename it"));
      }
      if (s.semantic.type() != CV_8U || s.semantic.rows != s.image.rows ||
          s.semantic.cols != s.image.cols) {
        return absl::InvalidArgumentError(absl::StrCat(
            SampleName(s, i), ": the label map must be 8-bit and of the image's size (",
            s.image.cols, "x", s.image.rows, "), got type ", s.semantic.type(), " and ",
            s.semantic.cols, "x", s.semantic.rows));
      }
      s.targets[core::kSemanticTarget] = s.semantic;
    }
  }
  auto pad_value = [&](const std::string& name) -> float {
    if (name == core::kSemanticTarget) return core::kIgnoreLabel;
    return options.targets != nullptr ? options.targets->PadValue(name) : 0.0f;
  };
  // Whether some image or map is smaller than the batch, which is then padded.
  bool padded = false;
  for (const core::Sample& s : samples) {
    padded = padded || s.image.rows != height || s.image.cols != width;
  }
  // The maps are written through raw pointers (CopyMap): check what the tensors will hold.
  for (const auto& [name, first] : samples.front().targets) {
    for (int64_t i = 0; i < n; ++i) {
      const core::Sample& s = samples[i];
      auto it = s.targets.find(name);
      if (it == s.targets.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(SampleName(s, i), ": target '", name, "' missing from this sample"));
      }
      const cv::Mat& map = it->second;
      if (map.channels() != 1 || TargetType(map) != TargetType(first)) {
        return absl::InvalidArgumentError(absl::StrCat(
            SampleName(s, i), ": target '", name, "' has OpenCV type ", map.type(),
            " where the batch's first sample has ", first.type(),
            "; a target generator must make single-channel maps of one type"));
      }
      if (map.rows > height || map.cols > width) {
        return absl::InvalidArgumentError(absl::StrCat(
            SampleName(s, i), ": target '", name, "' is ", map.cols, "x", map.rows,
            ", larger than the batch's images (", width, "x", height, ")"));
      }
      padded = padded || map.rows != height || map.cols != width;
    }
  }
  auto make = [&](at::IntArrayRef sizes, at::ScalarType type, float pad) {
    at::Tensor t;
    if (options.pin_memory) {
      // Page-locked memory from LibTorch's caching host allocator, which keeps a block from
      // reuse until the non-blocking copy to the GPU that reads it has finished (our pool
      // cannot know when that is).
      t = at::empty(sizes, at::TensorOptions().dtype(type).pinned_memory(true));
      if (padded) t.fill_(pad);
      return t;
    }
    if (options.pool != nullptr) {
      t = options.pool->NewTensor(sizes, type, /*zero=*/padded && pad == 0.0f);
    } else {
      t = padded && pad == 0.0f ? at::zeros(sizes, type) : at::empty(sizes, type);
    }
    if (padded && pad != 0.0f) t.fill_(pad);
    return t;
  };
  core::Batch batch;
  batch.images = make({n, 3, height, width}, at::kFloat, 0.0f);
  batch.image_sizes = at::empty({n, 2}, at::kLong);
  for (const auto& [name, map] : samples.front().targets) {
    batch.targets[name] = make({n, height, width}, TargetType(map), pad_value(name));
  }
  int64_t* sizes = batch.image_sizes.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    core::Sample& s = samples[i];
    // The picture's size, before any padding (core/batch.h).
    const cv::Size picture = s.size_before_padding.empty() ? s.image.size() : s.size_before_padding;
    sizes[2 * i] = picture.height;
    sizes[2 * i + 1] = picture.width;
    batch.collated_sizes.push_back({s.image.rows, s.image.cols});
    CopyImage(s.image, batch.images[i]);
    for (auto& [name, tensor] : batch.targets) CopyMap(s.targets.at(name), tensor[i]);
    s.image.release();
    s.targets.clear();
  }
  batch.samples = std::move(samples);
  return batch;
}

DataLoader::DataLoader(const core::Dataset& dataset,
                       std::vector<const core::Augmentation*> augmentations,
                       std::shared_ptr<const core::TargetGenerator> targets, LoaderOptions options)
    : dataset_(dataset),
      augmentations_(std::move(augmentations)),
      targets_(std::move(targets)),
      options_(options),
      // Enough for every tensor of the batches in flight (prefetched, being made, being
      // consumed) with a few targets each.
      memory_(std::make_shared<BatchMemoryPool>(
          8 * (options.prefetch_batches + options.num_workers + 2))) {}

DataLoader::~DataLoader() { StopWorkers(); }

void DataLoader::StopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  ready_.clear();
}

absl::Status DataLoader::GroupByAspectRatio() {
  if (!groups_.has_value()) {
    VISION_ASSIGN_OR_RETURN(groups_,
                            AspectRatioGroups(dataset_, options_.aspect_ratio_group_factor));
  }
  VISION_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> batches,
                          GroupedBatches(indices_, *groups_, options_.batch_size));
  indices_.clear();
  for (const std::vector<int64_t>& batch : batches) {
    indices_.insert(indices_.end(), batch.begin(), batch.end());
  }
  return absl::OkStatus();
}

void DataLoader::StartEpoch(int64_t epoch, std::vector<int64_t> indices, int64_t first_batch) {
  StopWorkers();
  epoch_ = epoch;
  indices_ = std::move(indices);
  {
    std::lock_guard<std::mutex> lock(bad_mutex_);
    bad_in_epoch_.clear();
  }
  num_batches_ = NumBatches(options_, static_cast<int64_t>(indices_.size()));
  // Any factor but -1 groups: a bad one is an error (AspectRatioBinEdges), not off.
  epoch_error_ = options_.aspect_ratio_group_factor != -1 ? GroupByAspectRatio() : absl::OkStatus();
  if (!epoch_error_.ok()) num_batches_ = 0;
  next_to_claim_ = next_to_return_ = std::clamp<int64_t>(first_batch, 0, num_batches_);
  stopping_ = false;
  for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

absl::Status DataLoader::NoteBadSample(int64_t index, const absl::Status& error) {
  const int64_t n = static_cast<int64_t>(indices_.size());
  std::lock_guard<std::mutex> lock(bad_mutex_);
  if (!bad_in_epoch_.emplace(index, std::string(error.message())).second) return absl::OkStatus();
  skipped_samples_.fetch_add(1);
  std::fprintf(stderr, "warning: skipping bad sample %lld of epoch %lld: %s\n",
               static_cast<long long>(index), static_cast<long long>(epoch_),
               std::string(error.message()).c_str());
  const int64_t bad = static_cast<int64_t>(bad_in_epoch_.size());
  if (bad <= options_.max_bad_sample_fraction * n) return absl::OkStatus();
  constexpr int kListed = 20;
  std::vector<std::string> listed;
  for (const auto& [i, why] : bad_in_epoch_) {
    if (static_cast<int>(listed.size()) == kListed) {
      listed.push_back(absl::StrCat("... and ", bad - kListed, " more"));
      break;
    }
    listed.push_back(absl::StrCat("sample ", i, ": ", why));
  }
  return absl::DataLossError(absl::StrFormat(
      "%d of the %d samples of this rank's share of epoch %d are bad, more than "
      "loader.max_bad_sample_fraction (%g) allows under on_bad_sample: SKIP; fix or remove "
      "them, or raise max_bad_sample_fraction. The bad samples so far:\n  %s",
      bad, n, epoch_, options_.max_bad_sample_fraction, absl::StrJoin(listed, "\n  ")));
}

absl::StatusOr<core::Batch> DataLoader::MakeBatch(int64_t batch_index) {
  const int64_t b = options_.batch_size;
  const int64_t n = static_cast<int64_t>(indices_.size());
  const int64_t begin = batch_index * b;
  const int64_t end = std::min<int64_t>(begin + b, n);
  const size_t want = static_cast<size_t>(end - begin);
  std::vector<core::Sample> samples;
  std::vector<std::map<std::string, at::Tensor>> instances;
  samples.reserve(want);
  // Loads position i of the share into the batch; a bad sample is noted (SKIP) or an error.
  auto add = [&](int64_t i) -> absl::Status {
    absl::StatusOr<core::Sample> sample =
        LoadSample(dataset_, augmentations_, targets_.get(), indices_[i], options_.seed, epoch_,
                   options_.keep_ground_truth);
    std::map<std::string, at::Tensor> per_image;
    if (sample.ok() && targets_ != nullptr) {
      const std::string what =
          absl::StrCat(SampleName(*sample, indices_[i]), ": target generation");
      absl::Status made = core::GuardTorch(what, [&] {
        return core::WithContext(what, targets_->GenerateInstances(*sample, &per_image));
      });
      if (!made.ok()) sample = made;
    }
    if (sample.ok()) {
      samples.push_back(std::move(sample).value());
      if (!per_image.empty()) instances.push_back(std::move(per_image));
      return absl::OkStatus();
    }
    if (options_.skip_bad_samples) return NoteBadSample(indices_[i], sample.status());
    return absl::Status(sample.status().code(),
                        absl::StrCat("loading sample ", indices_[i], " of epoch ", epoch_, ": ",
                                     sample.status().message(),
                                     " (set loader { on_bad_sample: SKIP } to skip such samples)"));
  };
  for (int64_t i = begin; i < end; ++i) VISION_RETURN_IF_ERROR(add(i));
  // Under SKIP, fill up from the samples that follow this batch in the share, wrapping to its
  // start: the batch keeps its size and the epoch its number of batches on every rank.
  for (int64_t j = 0; options_.refill_skipped && samples.size() < want &&
                      j < n - static_cast<int64_t>(want);
       ++j) {
    VISION_RETURN_IF_ERROR(add((end + j) % n));
  }
  // Without refilling, an all-bad batch is no batch (Next() passes over it).
  if (samples.empty() && !options_.refill_skipped) return core::Batch();
  if (samples.empty()) {
    return absl::DataLossError(absl::StrCat("every sample of batch ", batch_index,
                                            " and of the rest of this rank's share of epoch ",
                                            epoch_, " is bad"));
  }
  try {
    CollateOptions collate;
    collate.pin_memory = options_.pin_memory;
    collate.pool = memory_.get();
    collate.targets = targets_.get();
    absl::StatusOr<core::Batch> batch = Collate(std::move(samples), collate);
    if (!batch.ok() || instances.empty()) return batch;
    if (instances.size() != batch->samples.size()) {
      return absl::InternalError(absl::StrCat(
          "the target generator made per-image targets for ", instances.size(), " of ",
          batch->samples.size(), " samples of batch ", batch_index, "; it must make them for all or none"));
    }
    if (options_.pin_memory) {
      for (auto& image : instances) {
        for (auto& [name, tensor] : image) tensor = tensor.pin_memory();
      }
    }
    batch->instances = std::move(instances);
    return batch;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("collating batch ", batch_index, ": ",
                                            e.what_without_backtrace()));
  }
}

void DataLoader::WorkerLoop() {
  while (true) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] {
        return stopping_ || next_to_claim_ >= num_batches_ ||
               next_to_claim_ < next_to_return_ + options_.prefetch_batches;
      });
      if (stopping_ || next_to_claim_ >= num_batches_) return;
      k = next_to_claim_++;
    }
    absl::StatusOr<core::Batch> batch = MakeBatch(k);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(k, std::move(batch));
    }
    changed_.notify_all();
  }
}

absl::StatusOr<std::optional<core::Batch>> DataLoader::Next() {
  VISION_RETURN_IF_ERROR(epoch_error_);
  if (next_to_return_ >= num_batches_) return std::optional<core::Batch>();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<core::Batch> batch = absl::UnknownError("unset");
  if (workers_.empty()) {
    batch = MakeBatch(next_to_return_++);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return ready_.count(next_to_return_) > 0; });
    auto it = ready_.find(next_to_return_);
    batch = std::move(it->second);
    ready_.erase(it);
    ++next_to_return_;
    lock.unlock();
    changed_.notify_all();
  }
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  VISION_ASSIGN_OR_RETURN(core::Batch ready, std::move(batch));
  if (ready.samples.empty() && !options_.refill_skipped) return Next();
  return std::optional<core::Batch>(std::move(ready));
}

}  // namespace vision::data
