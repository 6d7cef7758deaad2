#include "engine/checkpoint.h"

#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(root ? root : "/tmp") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

struct Trainee {
  Trainee() : model(torch::nn::Linear(3, 2)), optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)) {}
  void Step() {
    optimizer.zero_grad();
    model->forward(torch::randn({4, 3})).pow(2).sum().backward();
    optimizer.step();
  }
  torch::nn::Linear model;
  torch::optim::SGD optimizer;
};

CheckpointMeta Meta(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.epoch = 2;
  m.batch_in_epoch = 5;
  m.has_best_metric = true;
  m.best_metric = 0.75;
  m.loss_scaler_state = {1024, 3, 1};
  m.config_text = "seed: 1";
  m.config_fingerprint = "abc";
  return m;
}

TEST(CheckpointTest, RoundTripRestoresEverythingExactly) {
  torch::manual_seed(0);
  Trainee a;
  a.Step();
  a.Step();
  ModelEma ema(*a.model, 0.9);
  const std::string path = TempDir("roundtrip") + "/c.pt";
  ASSERT_TRUE(SaveCheckpoint(path, {a.model.get(), &a.optimizer, &ema}, Meta(7)).ok());
  const at::Tensor expected_next_random = torch::rand({3});

  torch::manual_seed(123);
  Trainee b;
  ModelEma ema_b(*b.model, 0.9);
  CheckpointMeta meta;
  ASSERT_TRUE(LoadCheckpoint(path, {b.model.get(), &b.optimizer, &ema_b}, &meta).ok());
  EXPECT_EQ(meta.step, 7);
  EXPECT_EQ(meta.batch_in_epoch, 5);
  EXPECT_EQ(meta.loss_scaler_state, (std::vector<double>{1024, 3, 1}));
  EXPECT_EQ(meta.config_fingerprint, "abc");
  EXPECT_TRUE(at::equal(a.model->weight, b.model->weight));
  EXPECT_TRUE(at::equal(ema.values().at("weight"), ema_b.values().at("weight")));
  EXPECT_TRUE(at::equal(torch::rand({3}), expected_next_random));  // RNG restored
  // Momentum buffers restored: one more identical step gives identical weights.
  torch::manual_seed(5);
  a.Step();
  torch::manual_seed(5);
  b.Step();
  EXPECT_TRUE(at::equal(a.model->weight, b.model->weight));
}

TEST(CheckpointTest, ManagerKeepsLastKAndBest) {
  Trainee s;
  CheckpointManager manager(TempDir("keep"), /*keep_last=*/2, /*keep_best=*/true);
  for (int step : {10, 20, 30, 40}) {
    ASSERT_TRUE(manager.Save({s.model.get(), &s.optimizer, nullptr}, Meta(step), step == 20).ok());
  }
  const std::vector<std::string> kept = manager.List();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_THAT(kept[0], HasSubstr("checkpoint_40.pt"));
  EXPECT_THAT(kept[1], HasSubstr("checkpoint_30.pt"));
  auto best = ReadCheckpointMeta(manager.dir() + "/best.pt");
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->step, 20);
  for (const auto& entry : fs::directory_iterator(manager.dir())) {
    EXPECT_THAT(entry.path().string(), ::testing::Not(HasSubstr(".tmp")));
  }
}

void Truncate(const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); }

void FlipByteInTheMiddle(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto size = fs::file_size(path);
  // Flip a run of bytes in the middle: tensor data or zip structure, either must be caught.
  for (std::streamoff off = size / 2; off < static_cast<std::streamoff>(size / 2 + 64); ++off) {
    f.seekg(off);
    char c;
    f.read(&c, 1);
    f.seekp(off);
    c = static_cast<char>(~c);
    f.write(&c, 1);
  }
}

class CorruptionTest : public ::testing::TestWithParam<bool> {};

TEST_P(CorruptionTest, RestoreFallsBackToThePreviousCheckpoint) {
  Trainee s;
  CheckpointManager manager(TempDir(GetParam() ? "truncate" : "flip"), 3, false);
  ASSERT_TRUE(manager.Save({s.model.get(), &s.optimizer, nullptr}, Meta(1), false).ok());
  const at::Tensor good_weight = s.model->weight.clone();
  s.Step();
  ASSERT_TRUE(manager.Save({s.model.get(), &s.optimizer, nullptr}, Meta(2), false).ok());
  if (GetParam()) {
    Truncate(manager.List()[0]);
  } else {
    FlipByteInTheMiddle(manager.List()[0]);
  }
  Trainee fresh;
  std::vector<std::string> warnings;
  auto restored = manager.RestoreLatest({fresh.model.get(), &fresh.optimizer, nullptr},
                                        [](const std::string&, const CheckpointMeta&) {
                                          return absl::OkStatus();
                                        },
                                        &warnings);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ((*restored)->step, 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("checkpoint_2.pt"));
  EXPECT_TRUE(at::equal(fresh.model->weight, good_weight));
}

INSTANTIATE_TEST_SUITE_P(TruncatedOrFlipped, CorruptionTest, ::testing::Bool());

// A crash cut the only checkpoint short: nothing can be loaded, so training starts anew (the
// state untouched) and the unreadable file is kept aside, out of the way of later restores.
TEST(CheckpointTest, OnlyCheckpointCutShortStartsAnewKeepingItAside) {
  Trainee s;
  const std::string dir = TempDir("only_truncated");
  CheckpointManager manager(dir, 3, false);
  ASSERT_TRUE(manager.Save({s.model.get(), &s.optimizer, nullptr}, Meta(3), false).ok());
  Truncate(manager.List()[0]);
  Trainee fresh;
  const at::Tensor initial = fresh.model->weight.clone();
  std::vector<std::string> warnings;
  auto restored = manager.RestoreLatest(
      {fresh.model.get(), &fresh.optimizer, nullptr},
      [](const std::string&, const CheckpointMeta&) { return absl::OkStatus(); }, &warnings);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_FALSE(restored->has_value());
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("checkpoint_3.pt"));
  EXPECT_THAT(warnings[1], HasSubstr("kept as *.corrupt and training starts from step 0"));
  EXPECT_TRUE(at::equal(fresh.model->weight, initial));
  EXPECT_TRUE(manager.List().empty());
  EXPECT_TRUE(fs::exists(dir + "/checkpoint_3.pt.corrupt"));
}

TEST(CheckpointTest, RestoreReportsAcceptErrorsAndEmptyDirectories) {
  Trainee s;
  CheckpointManager manager(TempDir("accept"), 3, false);
  std::vector<std::string> warnings;
  auto none = manager.RestoreLatest({s.model.get(), nullptr, nullptr},
                                    [](const std::string&, const CheckpointMeta&) { return absl::OkStatus(); },
                                    &warnings);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(manager.Save({s.model.get(), nullptr, nullptr}, Meta(3), false).ok());
  auto refused = manager.RestoreLatest(
      {s.model.get(), nullptr, nullptr},
      [](const std::string&, const CheckpointMeta&) { return absl::FailedPreconditionError("config differs"); },
      &warnings);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CheckpointTest, UnwritableDirectoryIsAnErrorAndLeavesNothing) {
  Trainee s;
  const std::string dir = TempDir("unwritable");
  const std::string blocker = dir + "/file";
  std::ofstream(blocker) << "x";
  CheckpointManager manager(blocker + "/sub", 3, false);  // a path below a regular file
  absl::Status status = manager.Save({s.model.get(), nullptr, nullptr}, Meta(1), false);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("cannot create checkpoint directory"));
}

}  // namespace
}  // namespace vision::engine
