// The data loader: worker threads decode, augment and generate training targets into a bounded
// prefetch queue; batches come out in order and are identical for any number of threads
// (every sample draws from its own RNG seeded by (seed, epoch, dataset index)).
#ifndef VISION_DATA_LOADER_LOADER_H_
#define VISION_DATA_LOADER_LOADER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

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
  // Skip samples that fail to load (logged and counted) instead of failing.
  bool skip_bad_samples = false;
  uint64_t seed = 0;
  // Keep each sample's annotations as loaded in Sample::ground_truth (for evaluation).
  bool keep_ground_truth = false;
  // Page-locked batch memory for faster host-to-GPU copies (CUDA builds only).
  bool pin_memory = false;
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

// Stacks images into [N, 3, H, W] float and each target into [N, H, W], zero-padding to the
// largest height and width (bottom and right). 8-bit BGR images become RGB in [0, 1]; float
// images (after Normalize) are taken as they are (RGB). Sample images are released.
absl::StatusOr<core::Batch> Collate(std::vector<core::Sample> samples, bool pin_memory);

class DataLoader {
 public:
  DataLoader(const core::Dataset& dataset, std::vector<const core::Augmentation*> augmentations,
             std::shared_ptr<const core::TargetGenerator> targets, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts an epoch over `indices` (this rank's share, in order), beginning at batch
  // `first_batch` (to resume inside an epoch). Stops any epoch still running.
  void StartEpoch(int64_t epoch, std::vector<int64_t> indices, int64_t first_batch = 0);

  // The next batch, nullopt at the end of the epoch, or the first sample error.
  absl::StatusOr<std::optional<core::Batch>> Next();

  int64_t num_batches() const { return num_batches_; }
  // Batches returned so far in this epoch, counting those skipped by first_batch.
  int64_t position() const { return next_to_return_; }
  int64_t skipped_samples() const { return skipped_samples_.load(); }
  // Seconds Next() spent waiting for workers since construction.
  double wait_seconds() const { return wait_seconds_; }

 private:
  absl::StatusOr<core::Batch> MakeBatch(int64_t batch_index);
  void WorkerLoop();
  void StopWorkers();

  const core::Dataset& dataset_;
  const std::vector<const core::Augmentation*> augmentations_;
  const std::shared_ptr<const core::TargetGenerator> targets_;
  const LoaderOptions options_;

  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
  int64_t num_batches_ = 0;
  int64_t next_to_claim_ = 0;
  int64_t next_to_return_ = 0;
  bool stopping_ = false;
  std::map<int64_t, absl::StatusOr<core::Batch>> ready_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::thread> workers_;
  std::atomic<int64_t> skipped_samples_{0};
  double wait_seconds_ = 0;
};

}  // namespace vision::data

#endif  // VISION_DATA_LOADER_LOADER_H_
