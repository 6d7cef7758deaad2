// The data loader: worker threads decode, augment and generate training targets into a bounded
// prefetch queue; batches come out in order and are identical for any number of threads
// (every sample draws from its own RNG seeded by (seed, epoch, dataset index)).
#ifndef VISION_DATA_LOADER_LOADER_H_
#define VISION_DATA_LOADER_LOADER_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "core/augmentation.h"
#include "core/batch.h"
#include "core/dataset.h"
#include "core/target_generator.h"

namespace vision::data {

struct LoaderOptions {
  int batch_size = 1;
  // 0 loads on the calling thread.
  int num_workers = 2;
  // Batches prepared ahead of the consumer.
  int prefetch_batches = 4;
  bool drop_last = true;
  // Skip samples that fail to load (logged and counted) instead of failing. A batch with bad
  // samples is filled up from the samples that follow it in this rank's share of the epoch
  // (wrapping to the share's start at its end), so every batch keeps its size and every rank
  // the same number of batches; batch k stays a function of (seed, epoch, indices, k) alone,
  // which keeps it the same for any number of threads and after resuming at batch k. The
  // samples borrowed this way are seen twice in that epoch.
  bool skip_bad_samples = false;
  // With skip_bad_samples: when more than this share of the epoch's samples of this rank are
  // bad, Next() fails naming them.
  double max_bad_sample_fraction = 0.01;
  // With skip_bad_samples: fill a batch up from the following samples (above; training). Off
  // (evaluation), a bad sample is only left out, so that no sample is seen twice: its batch is
  // smaller, and Next() passes over a batch whose samples were all bad.
  bool refill_skipped = true;
  uint64_t seed = 0;
  // Keep each sample's annotations as loaded in Sample::ground_truth (for evaluation).
  bool keep_ground_truth = false;
  // Page-locked batch memory for non-blocking host-to-GPU copies (needs a CUDA device; the
  // trainer and evaluation set it when training on one).
  bool pin_memory = false;
  // >= 0: batches of images of similar shape, as torchvision's detection reference with
  // --aspect-ratio-group-factor k (aspect_ratio_groups.h): the dataset's images fall into
  // aspect-ratio bins (Dataset::ImageSize, asked once per loader), and an epoch's batches are
  // GroupedBatches of its indices in the order given, so num_samples / batch_size batches
  // whatever drop_last says. Batch k is still a function of (indices, k), so a run resumed at
  // batch k equals an uninterrupted one. Under skip_bad_samples, a batch with bad samples is
  // filled up from the samples that follow it in the grouped order (possibly of another bin).
  // -1: off; other negative values are an error (Next() returns it).
  int aspect_ratio_group_factor = -1;
};

// The batches of an epoch over `num_samples` indices: num_samples / batch_size under
// aspect-ratio grouping (any factor but -1) and with drop_last, rounded up otherwise.
int64_t NumBatches(const LoaderOptions& options, int64_t num_samples);

// Reuses the memory of dropped batches for new ones. A batch is tens of megabytes (8
// normalised 640 x 640 images alone are 39 MB, above malloc's mmap threshold), so without
// reuse every batch is new memory that the kernel faults in page by page: on DBNet's training
// pipeline that was a quarter of the loader's CPU time (18.3 -> 13.6 ms per image with the
// pool, data/loader/loader_benchmark). A freed tensor's buffer goes back to the pool
// (at most `max_free_buffers` are kept; more are released); a request takes the smallest kept
// buffer that fits and wastes at most half of it. Thread-safe; the tensors keep the pool
// alive, so batches may outlive their loader.
class BatchMemoryPool : public std::enable_shared_from_this<BatchMemoryPool> {
 public:
  explicit BatchMemoryPool(int max_free_buffers) : max_free_buffers_(max_free_buffers) {}
  ~BatchMemoryPool();
  BatchMemoryPool(const BatchMemoryPool&) = delete;
  BatchMemoryPool& operator=(const BatchMemoryPool&) = delete;

  // A contiguous CPU tensor, uninitialised unless `zero`. The pool must be owned by a
  // std::shared_ptr.
  at::Tensor NewTensor(at::IntArrayRef sizes, at::ScalarType type, bool zero);

  int free_buffers();

 private:
  void Release(void* data, size_t capacity);

  const int max_free_buffers_;
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // capacity in bytes -> buffer
};

// The RNG seed of one sample: a SplitMix64 mix of its coordinates.
uint64_t SampleSeed(uint64_t seed, int64_t epoch, int64_t index);

// Loads dataset sample `index`, applies `augmentations` in order and then `targets` (may be
// null). Errors name the sample.
absl::StatusOr<core::Sample> LoadSample(const core::Dataset& dataset,
                                        const std::vector<const core::Augmentation*>& augmentations,
                                        const core::TargetGenerator* targets, int64_t index,
                                        uint64_t seed, int64_t epoch,
                                        bool keep_ground_truth = false);

struct CollateOptions {
  // Page-locked tensors (for non-blocking copies to a CUDA device).
  bool pin_memory = false;
  // Where unpinned tensors come from, when given.
  BatchMemoryPool* pool = nullptr;
  // Says what each generated map is padded with (0 without a generator).
  const core::TargetGenerator* targets = nullptr;
};

// Stacks images into [N, 3, H, W] float and each dense target into [N, H, W], padding to the
// largest height and width (bottom and right; images with 0, maps with their PadValue), and
// records each image's size before padding (Batch::image_sizes) and as collated
// (Batch::collated_sizes). 8-bit BGR images become RGB
// in [0, 1]; float images (after Normalize) are taken as they are (RGB). Targets keep their
// element type: CV_8U maps (binary masks) become uint8 tensors, to be converted by the model
// on its device (a quarter of the memory and host-to-device traffic of float); other maps
// become float. Label maps (Sample::semantic) become the uint8 target "semantic", padded with
// core::kIgnoreLabel. Every sample must have the first sample's targets, single-channel, of
// the same kind, and all or none a label map of its image's size. Sample images and targets
// are released.
absl::StatusOr<core::Batch> Collate(std::vector<core::Sample> samples,
                                    const CollateOptions& options = {});

class DataLoader {
 public:
  DataLoader(const core::Dataset& dataset, std::vector<const core::Augmentation*> augmentations,
             std::shared_ptr<const core::TargetGenerator> targets, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts an epoch over `indices` (this rank's share, in order), beginning at batch
  // `first_batch` (to resume inside an epoch). Stops any epoch still running. Under
  // aspect-ratio grouping the first epoch asks the dataset for its image sizes; an error there
  // (or a bad index) is what Next() returns.
  void StartEpoch(int64_t epoch, std::vector<int64_t> indices, int64_t first_batch = 0);

  // The next batch, nullopt at the end of the epoch, or the first sample error.
  absl::StatusOr<std::optional<core::Batch>> Next();

  int64_t num_batches() const { return num_batches_; }
  // Batches returned so far in this epoch, counting those skipped by first_batch.
  int64_t position() const { return next_to_return_; }
  // Bad samples skipped since construction, each counted once per epoch in which it was
  // found (also those found while preparing batches not yet returned).
  int64_t skipped_samples() const { return skipped_samples_.load(); }
  // Seconds Next() spent waiting for workers since construction.
  double wait_seconds() const { return wait_seconds_; }

 private:
  absl::StatusOr<core::Batch> MakeBatch(int64_t batch_index);
  // Replaces indices_ by its aspect-ratio grouped batches, concatenated.
  absl::Status GroupByAspectRatio();
  // Records a bad sample of the epoch; an error once too many of them are bad.
  absl::Status NoteBadSample(int64_t index, const absl::Status& error);
  void WorkerLoop();
  void StopWorkers();

  const core::Dataset& dataset_;
  const std::vector<const core::Augmentation*> augmentations_;
  const std::shared_ptr<const core::TargetGenerator> targets_;
  const LoaderOptions options_;

  int64_t epoch_ = 0;
  // The epoch's indices, batch after batch (under grouping: the grouped batches, concatenated).
  std::vector<int64_t> indices_;
  // Under aspect-ratio grouping: each dataset sample's group, once known.
  std::optional<std::vector<int>> groups_;
  // Why the epoch cannot start (grouping failed), returned by Next().
  absl::Status epoch_error_;
  int64_t num_batches_ = 0;
  int64_t next_to_claim_ = 0;
  int64_t next_to_return_ = 0;
  bool stopping_ = false;
  std::map<int64_t, absl::StatusOr<core::Batch>> ready_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::thread> workers_;
  std::atomic<int64_t> skipped_samples_{0};
  std::mutex bad_mutex_;
  std::map<int64_t, std::string> bad_in_epoch_;  // dataset index -> why it is bad
  double wait_seconds_ = 0;
  const std::shared_ptr<BatchMemoryPool> memory_;
};

}  // namespace vision::data

#endif  // VISION_DATA_LOADER_LOADER_H_
