#include "models/testing/train_for_test.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/collectives.h"
#include "core/config/loader.h"
#include "engine/trainer.h"
#include "gtest/gtest.h"

namespace vision::models::testing {

std::vector<double> TrainAndReadLoss(const std::string& config_path, int steps,
                                     const std::string& loss) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/run");
  std::filesystem::remove_all(dir);
  absl::StatusOr<core::TrainPipelineConfig> config =
      core::LoadPipelineConfig(config_path, {absl::StrCat("checkpoint { output_dir: \"", dir, "\" }")});
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return {};
  core::SingleProcess single;
  engine::TrainerOptions options;
  options.verbose = false;
  auto trainer = engine::Trainer::Create(*config, &single, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  auto result = (*trainer)->Run();
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  EXPECT_EQ(result->steps, steps);
  EXPECT_TRUE(std::filesystem::exists(absl::StrCat(dir, "/checkpoint_", steps, ".pt")));
  std::vector<double> values;
  std::ifstream log(dir + "/metrics.jsonl");
  const std::string key = absl::StrCat("\"", loss, "\":");
  for (std::string line; std::getline(log, line);) {
    const size_t at = line.find(key);
    if (at != std::string::npos) values.push_back(std::stod(line.substr(at + key.size())));
  }
  return values;
}

}  // namespace vision::models::testing
