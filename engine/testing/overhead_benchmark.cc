// Engine overhead per step against a plain Python PyTorch loop (benchmarks/engine_overhead.sh
// runs both): a tiny model, so that what the framework does around the model dominates.
// Prints the full training step time through engine::Trainer (loader threads, target
// generation, collation, losses, clipping, schedule, logging) and the time of the model's own
// forward, backward and optimizer step on a fixed batch; their difference is the overhead.
#include <chrono>
#include <cstdio>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/sgd.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/collectives.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "engine/trainer.h"

ABSL_FLAG(int, steps, 400, "timed training steps");
ABSL_FLAG(int, batch, 8, "images per step");
ABSL_FLAG(int, workers, 1, "loader threads");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int steps = absl::GetFlag(FLAGS_steps), batch = absl::GetFlag(FLAGS_batch);
  vision::core::TrainPipelineConfig config;
  const std::string text = absl::StrCat(R"pb(
    model { type: "TestRegressor" }
    train_data {
      dataset { type: "TestImages" options { [type.googleapis.com/vision.engine.testing.TestImagesOptions] { size: 4096 } } }
      loader { batch_size: )pb", batch, " num_workers: ", absl::GetFlag(FLAGS_workers), R"pb( }
    }
    optimizer { type: "SGD" lr: 0.01 }
    lr_schedule { type: "Cosine" }
    train { max_steps: )pb", steps, R"pb( clip_grad_norm: 10 intra_op_threads: 1 }
    logging { every_n_steps: 50 tensorboard: false }
    checkpoint { every_n_steps: 0 auto_resume: false output_dir: "/tmp/vision_overhead_benchmark" })pb");
  if (!vision::core::MergeConfigText(text, "benchmark", &config).ok()) return 1;
  vision::core::SingleProcess single;
  vision::engine::TrainerOptions options;
  options.verbose = false;
  auto trainer = vision::engine::Trainer::Create(config, &single, options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(trainer.status().message()).c_str());
    return 1;
  }
  auto result = (*trainer)->Run();
  if (!result.ok()) {
    std::fprintf(stderr, "%s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  const double step_ms = 1000.0 * batch / result->images_per_second;

  // The model's own work on a fixed batch: forward, loss, backward, SGD step.
  at::set_num_threads(1);
  auto model = vision::core::BuildModel(config.model());
  if (!model.ok()) return 1;
  torch::optim::SGD sgd((*model)->parameters(), torch::optim::SGDOptions(0.01));
  vision::core::Batch fixed;
  fixed.images = at::rand({batch, 3, 12, 12});
  fixed.targets["bright"] = (at::rand({batch, 12, 12}) > 0.5).to(at::kFloat);
  auto model_step = [&] {
    sgd.zero_grad();
    (*model)->Losses(fixed).at("mse").backward();
    sgd.step();
  };
  for (int i = 0; i < 20; ++i) model_step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) model_step();
  const double model_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
  std::printf("ours    step %.3f ms  model %.3f ms  overhead %.3f ms\n", step_ms, model_ms,
              step_ms - model_ms);
  return 0;
}
