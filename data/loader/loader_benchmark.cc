// DataLoader throughput on DBNet's training pipeline, built from a pipeline config exactly as
// the trainer builds it (dataset, train_data augmentations, the model's target generator):
// JPEG decode, augmentation and DB label generation, collated into batches. Prints images/s
// and CPU milliseconds per image (all threads) for each worker-thread count, timed after a
// warm-up batch. Run by
// benchmarks/loader_vs_dataloader.sh next to a Python PyTorch DataLoader doing the same.
//
//   loader_benchmark --data_dir=DIR [--config=models/dbnet/configs/icdar2015_resnet18.pbtxt
//       --threads=1,2,4 --batch=8 --epochs=1]
//
// DIR is an ICDAR2015-layout root (ch4_training_images/, ...), e.g. from
// //data/synthetic:make_synthetic_text. Intra-op parallelism is off so each worker thread
// uses one core: at::set_num_threads(1) and cv::setNumThreads(0) (OpenCV runs every function
// sequentially on the calling thread).
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <ATen/Parallel.h>
#include <opencv2/core.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/config/loader.h"
#include "core/host_memory.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "data/loader/loader.h"

ABSL_FLAG(std::string, config, "models/dbnet/configs/icdar2015_resnet18.pbtxt",
          "Pipeline config whose model, train_data augmentations and loader seed are used.");
ABSL_FLAG(std::string, data_dir, "",
          "ICDAR2015-layout root replacing the config's train_data root (split \"train\").");
ABSL_FLAG(std::vector<std::string>, threads, std::vector<std::string>({"1", "2", "4"}),
          "Worker-thread counts to measure, in order.");
ABSL_FLAG(int, batch, 8, "Images per batch.");
ABSL_FLAG(bool, retain_host_memory, true,
          "Keep freed host memory for reuse as //tools:train does (core/host_memory.h).");
ABSL_FLAG(int, epochs, 1, "Passes over the training images per thread count.");

namespace vision::data {
namespace {

// CPU seconds of the whole process (every thread): with the machine shared, CPU time per
// image says what the work costs even when the wall-clock rate is disturbed.
double ProcessCpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

absl::Status Run() {
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  if (data_dir.empty()) return absl::InvalidArgumentError("--data_dir is required");
  std::vector<int> thread_counts;
  for (const std::string& text : absl::GetFlag(FLAGS_threads)) {
    int count = 0;
    if (!absl::SimpleAtoi(text, &count) || count < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--threads: expected positive integers, got '", text, "'"));
    }
    thread_counts.push_back(count);
  }
  at::set_num_threads(1);
  if (absl::GetFlag(FLAGS_retain_host_memory)) core::RetainFreedHostMemory();
  cv::setNumThreads(0);

  const std::string root_override = absl::StrCat(
      "train_data { dataset { options { [type.googleapis.com/vision.data.datasets."
      "ICDAR2015Options] { root: \"",
      data_dir, "\" split: \"train\" } } } }");
  VISION_ASSIGN_OR_RETURN(const core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), {root_override}));
  VISION_ASSIGN_OR_RETURN(const std::unique_ptr<core::Dataset> dataset,
                          core::BuildDataset(config.train_data(), "train_data"));
  VISION_ASSIGN_OR_RETURN(const std::vector<std::unique_ptr<core::Augmentation>> augmentations,
                          core::BuildAugmentations(config.train_data(), "train_data"));
  VISION_ASSIGN_OR_RETURN(const std::shared_ptr<core::Model> model,
                          core::BuildModel(config.model()));
  std::vector<const core::Augmentation*> pipeline;
  std::vector<std::string> names;
  for (int i = 0; i < config.train_data().augmentations_size(); ++i) {
    pipeline.push_back(augmentations[i].get());
    names.push_back(config.train_data().augmentations(i).type());
  }
  const int batch_size = absl::GetFlag(FLAGS_batch);
  const int epochs = absl::GetFlag(FLAGS_epochs);
  std::vector<int64_t> indices(dataset->Size());
  std::iota(indices.begin(), indices.end(), 0);
  std::printf("ours: %lld images from %s, batch %d, %d epoch(s) per thread count; %s -> %s\n",
              static_cast<long long>(dataset->Size()), data_dir.c_str(), batch_size, epochs,
              absl::StrJoin(names, ", ").c_str(), config.model().type().c_str());

  for (int threads : thread_counts) {
    LoaderOptions options;
    options.batch_size = batch_size;
    options.num_workers = threads;
    options.prefetch_batches = 2 * threads;
    options.seed = config.seed();
    DataLoader loader(*dataset, pipeline, model->MakeTargetGenerator(), options);
    int64_t images = 0;
    bool warmed_up = false;
    std::chrono::steady_clock::time_point start;
    double start_cpu = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      loader.StartEpoch(epoch, indices);
      while (true) {
        VISION_ASSIGN_OR_RETURN(std::optional<core::Batch> batch, loader.Next());
        if (!batch.has_value()) break;
        if (!warmed_up) {  // not counted: it includes starting the threads
          warmed_up = true;
          start = std::chrono::steady_clock::now();
          start_cpu = ProcessCpuSeconds();
          continue;
        }
        images += batch->images.size(0);
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu_seconds = ProcessCpuSeconds() - start_cpu;
    if (images == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "only the warm-up batch was loaded; use more images or --epochs (", dataset->Size(),
          " images, batch ", batch_size, ")"));
    }
    std::printf(
        "ours threads %d: %.1f images/s, %.1f CPU ms/image (%lld images in %.2f s after a "
        "warm-up batch)\n",
        threads, images / seconds, 1e3 * cpu_seconds / images, static_cast<long long>(images),
        seconds);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::data

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::Status status = vision::data::Run(); !status.ok()) {
    std::fprintf(stderr, "loader_benchmark: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
