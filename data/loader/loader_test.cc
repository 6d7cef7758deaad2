#include "data/loader/loader.h"

#include <random>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data {
namespace {

using ::testing::HasSubstr;

// Sample i: an 8x(6+i%3) image filled with i, one text polygon; sample `bad` fails to load.
class FakeDataset : public core::Dataset {
 public:
  explicit FakeDataset(int64_t size, int64_t bad = -1) : size_(size), bad_(bad) {}
  int64_t Size() const override { return size_; }
  absl::StatusOr<core::Sample> Load(int64_t index) const override {
    if (index == bad_) return absl::DataLossError(absl::StrCat("img_", index, ".jpg: cannot decode"));
    core::Sample s;
    s.image_path = absl::StrCat("img_", index, ".jpg");
    s.image = cv::Mat(8, 6 + index % 3, CV_8UC3, cv::Scalar(index, index, index));
    s.texts.push_back({{{0, 0}, {1, 0}, {1, 1}}, "t", false});
    return s;
  }
  std::string Describe() const override { return "fake"; }

 private:
  int64_t size_;
  int64_t bad_;
};

// Adds noise drawn from the sample's RNG, so any dependence on thread scheduling shows.
class Noise : public core::Augmentation {
 public:
  absl::Status Apply(core::Sample* s, std::mt19937_64& rng) const override {
    cv::Mat noise(s->image.size(), CV_8UC3);
    for (auto it = noise.begin<cv::Vec3b>(); it != noise.end<cv::Vec3b>(); ++it) {
      *it = cv::Vec3b(rng() % 50, rng() % 50, rng() % 50);
    }
    s->image += noise;
    return absl::OkStatus();
  }
};

// A target map holding the image's first channel.
class FirstChannel : public core::TargetGenerator {
 public:
  absl::Status Generate(core::Sample* s) const override {
    cv::Mat channel;
    cv::extractChannel(s->image, channel, 0);
    s->targets["first"] = channel;
    return absl::OkStatus();
  }
};

std::vector<core::Batch> RunEpoch(const core::Dataset& dataset, int workers, int64_t epoch,
                                  std::vector<int64_t> indices, int64_t first_batch = 0) {
  static const Noise noise;
  LoaderOptions options;
  options.batch_size = 3;
  options.num_workers = workers;
  options.prefetch_batches = 2;
  options.drop_last = false;
  options.seed = 17;
  DataLoader loader(dataset, {&noise}, std::make_shared<FirstChannel>(), options);
  loader.StartEpoch(epoch, std::move(indices), first_batch);
  std::vector<core::Batch> batches;
  while (true) {
    auto batch = loader.Next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || !batch->has_value()) break;
    batches.push_back(std::move(**batch));
  }
  return batches;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (i * 7) % n;  // a fixed permutation (n coprime to 7)
  return v;
}

TEST(DataLoaderTest, BatchesAreIdenticalForAnyNumberOfThreads) {
  FakeDataset dataset(11);
  std::vector<core::Batch> reference = RunEpoch(dataset, 0, 1, Range(11));
  ASSERT_EQ(reference.size(), 4u);  // 3 + 3 + 3 + 2
  EXPECT_EQ(reference.back().images.size(0), 2);
  for (int workers : {1, 2, 4}) {
    std::vector<core::Batch> batches = RunEpoch(dataset, workers, 1, Range(11));
    ASSERT_EQ(batches.size(), reference.size()) << workers;
    for (size_t b = 0; b < batches.size(); ++b) {
      EXPECT_TRUE(at::equal(batches[b].images, reference[b].images)) << workers << " " << b;
      EXPECT_TRUE(at::equal(batches[b].targets["first"], reference[b].targets["first"]));
      for (size_t i = 0; i < batches[b].samples.size(); ++i) {
        EXPECT_EQ(batches[b].samples[i].image_path, reference[b].samples[i].image_path);
      }
    }
  }
}

TEST(DataLoaderTest, FollowsIndexOrderAndEpochChangesAugmentation) {
  FakeDataset dataset(6);
  std::vector<core::Batch> e1 = RunEpoch(dataset, 2, 1, {5, 4, 3, 2, 1, 0});
  ASSERT_EQ(e1.size(), 2u);
  EXPECT_EQ(e1[0].samples[0].image_path, "img_5.jpg");
  EXPECT_EQ(e1[1].samples[2].image_path, "img_0.jpg");
  std::vector<core::Batch> e2 = RunEpoch(dataset, 2, 2, {5, 4, 3, 2, 1, 0});
  EXPECT_FALSE(at::equal(e1[0].images, e2[0].images));
}

TEST(DataLoaderTest, ResumesInsideAnEpoch) {
  FakeDataset dataset(11);
  std::vector<core::Batch> full = RunEpoch(dataset, 2, 3, Range(11));
  std::vector<core::Batch> resumed = RunEpoch(dataset, 2, 3, Range(11), /*first_batch=*/2);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_TRUE(at::equal(resumed[0].images, full[2].images));
  EXPECT_TRUE(at::equal(resumed[1].images, full[3].images));
}

TEST(DataLoaderTest, CollatePadsAndConvertsToRgbUnitRange) {
  std::vector<core::Sample> samples(2);
  samples[0].image = cv::Mat(2, 3, CV_8UC3, cv::Scalar(255, 0, 51));  // BGR
  samples[1].image = cv::Mat(4, 2, CV_8UC3, cv::Scalar(0, 0, 0));
  samples[0].targets["m"] = cv::Mat(2, 3, CV_32F, cv::Scalar(0.5));
  samples[1].targets["m"] = cv::Mat(4, 2, CV_32F, cv::Scalar(1.0));
  auto batch = Collate(std::move(samples), false);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->images.sizes(), (at::IntArrayRef{2, 3, 4, 3}));
  EXPECT_FLOAT_EQ(batch->images[0][0][1][2].item<float>(), 0.2f);  // R = 51 / 255
  EXPECT_FLOAT_EQ(batch->images[0][2][0][0].item<float>(), 1.0f);  // B
  EXPECT_FLOAT_EQ(batch->images[0][0][3][0].item<float>(), 0.0f);  // padding
  EXPECT_EQ(batch->targets["m"].sizes(), (at::IntArrayRef{2, 4, 3}));
  EXPECT_FLOAT_EQ(batch->targets["m"][0][1][2].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(batch->targets["m"][0][3][2].item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(batch->targets["m"][1][3][1].item<float>(), 1.0f);
  EXPECT_TRUE(batch->samples[0].image.empty());
}

TEST(DataLoaderTest, BadSampleFailsNamingItOrIsSkippedAndCounted) {
  FakeDataset dataset(6, /*bad=*/4);
  for (int workers : {0, 2}) {
    LoaderOptions options;
    options.batch_size = 2;
    options.num_workers = workers;
    DataLoader loader(dataset, {}, nullptr, options);
    loader.StartEpoch(0, {0, 1, 4, 5, 2, 3});
    EXPECT_TRUE(loader.Next().ok());
    auto failed = loader.Next();
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(failed.status().message(), HasSubstr("img_4.jpg: cannot decode"));
    EXPECT_THAT(failed.status().message(), HasSubstr("on_bad_sample: SKIP"));

    options.skip_bad_samples = true;
    DataLoader skipping(dataset, {}, nullptr, options);
    skipping.StartEpoch(0, {0, 1, 4, 5, 2, 3});
    int images = 0;
    while (true) {
      auto batch = skipping.Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      if (!batch->has_value()) break;
      images += (*batch)->images.size(0);
    }
    EXPECT_EQ(images, 5);
    EXPECT_EQ(skipping.skipped_samples(), 1);
  }
}

TEST(DataLoaderTest, DropLastAndEarlyShutdown) {
  FakeDataset dataset(100);
  LoaderOptions options;
  options.batch_size = 8;
  options.num_workers = 3;
  options.drop_last = true;
  auto loader = std::make_unique<DataLoader>(dataset, std::vector<const core::Augmentation*>{},
                                             nullptr, options);
  loader->StartEpoch(0, Range(100));
  EXPECT_EQ(loader->num_batches(), 12);
  ASSERT_TRUE(loader->Next().ok());
  loader.reset();  // workers mid-epoch must stop and join
}

}  // namespace
}  // namespace vision::data
