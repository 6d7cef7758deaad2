#include "data/loader/loader.h"

#include <atomic>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/loader/aspect_ratio_groups.h"
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
  samples[0].targets["b"] = cv::Mat(2, 3, CV_8U, cv::Scalar(1));
  samples[1].targets["b"] = cv::Mat(4, 2, CV_8U, cv::Scalar(3));
  auto batch = Collate(std::move(samples));
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->images.sizes(), (at::IntArrayRef{2, 3, 4, 3}));
  EXPECT_FLOAT_EQ(batch->images[0][0][1][2].item<float>(), 0.2f);  // R = 51 / 255
  EXPECT_FLOAT_EQ(batch->images[0][2][0][0].item<float>(), 1.0f);  // B
  EXPECT_FLOAT_EQ(batch->images[0][0][3][0].item<float>(), 0.0f);  // padding
  EXPECT_EQ(batch->targets["m"].sizes(), (at::IntArrayRef{2, 4, 3}));
  EXPECT_FLOAT_EQ(batch->targets["m"][0][1][2].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(batch->targets["m"][0][3][2].item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(batch->targets["m"][1][3][1].item<float>(), 1.0f);
  EXPECT_EQ(batch->targets["m"].scalar_type(), at::kFloat);
  // Byte maps stay bytes, padded with 0: 6 ones and 8 threes.
  EXPECT_EQ(batch->targets["b"].scalar_type(), at::kByte);
  EXPECT_EQ(batch->targets["b"].sizes(), (at::IntArrayRef{2, 4, 3}));
  EXPECT_EQ(batch->targets["b"].sum().item<int64_t>(), 6 * 1 + 8 * 3);
  EXPECT_EQ(batch->targets["b"][1][3][1].item<uint8_t>(), 3);
  EXPECT_EQ(batch->targets["b"][1][3][2].item<uint8_t>(), 0);
  EXPECT_TRUE(batch->samples[0].image.empty());
}

// Without padding the tensors are not zero-initialised: every element must be written.
TEST(DataLoaderTest, CollateOfEqualSizesWritesEveryElement) {
  std::vector<core::Sample> samples(2);
  cv::Mat normalized(3, 4, CV_32FC3);
  cv::randu(normalized, -2.0, 2.0);
  cv::Mat map(3, 4, CV_8U);
  cv::randu(map, 0, 256);
  for (core::Sample& s : samples) {
    s.image = normalized;
    s.targets["b"] = map;
  }
  auto batch = Collate(std::move(samples));
  ASSERT_TRUE(batch.ok()) << batch.status();
  for (int64_t i = 0; i < 2; ++i) {
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 3; ++y) {
        for (int x = 0; x < 4; ++x) {
          ASSERT_EQ(batch->images[i][c][y][x].item<float>(), normalized.at<cv::Vec3f>(y, x)[c]);
          ASSERT_EQ(batch->targets["b"][i][y][x].item<uint8_t>(), map.at<uchar>(y, x));
        }
      }
    }
  }
}

TEST(DataLoaderTest, CollateRejectsTargetsOfMixedTypesOrTooLarge) {
  std::vector<core::Sample> samples(2);
  samples[0].image_path = "a.jpg";
  samples[1].image_path = "b.jpg";
  for (core::Sample& s : samples) s.image = cv::Mat(4, 4, CV_8UC3, cv::Scalar(0, 0, 0));
  samples[0].targets["t"] = cv::Mat(4, 4, CV_8U, cv::Scalar(1));
  samples[1].targets["t"] = cv::Mat(4, 4, CV_32F, cv::Scalar(1));
  auto mixed = Collate(samples);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), HasSubstr("b.jpg: target 't' has OpenCV type"));

  samples[1].targets["t"] = cv::Mat(5, 4, CV_8U, cv::Scalar(1));
  auto large = Collate(samples);
  EXPECT_THAT(large.status().message(), HasSubstr("b.jpg: target 't' is 4x5, larger than"));
}

// A generated map padded with -1, and per-image targets holding the image's height.
class PaddedMapAndCounts : public core::TargetGenerator {
 public:
  absl::Status Generate(core::Sample* s) const override {
    s->targets["d"] = cv::Mat(s->image.rows, s->image.cols, CV_32F, cv::Scalar(2.0));
    return absl::OkStatus();
  }
  float PadValue(const std::string& name) const override { return name == "d" ? -1.0f : 0.0f; }
  absl::Status GenerateInstances(const core::Sample& s,
                                 std::map<std::string, at::Tensor>* out) const override {
    (*out)["rows"] = at::full({s.image.rows % 3 + 1}, s.image.rows, at::kLong);
    return absl::OkStatus();
  }
};

TEST(DataLoaderTest, CollateRecordsTheSizeBeforeAnAugmentationPadded) {
  // PadToDivisor padded 50x30 to 64x32: the models must clip to 50x30, not to the padding.
  std::vector<core::Sample> samples(2);
  samples[0].image = cv::Mat(32, 64, CV_32FC3, cv::Scalar(0, 0, 0));
  samples[0].size_before_padding = cv::Size(50, 30);
  samples[1].image = cv::Mat(20, 40, CV_32FC3, cv::Scalar(0, 0, 0));
  auto batch = Collate(std::move(samples), CollateOptions());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(at::equal(batch->image_sizes, at::tensor({30, 50, 20, 40}, at::kLong).view({2, 2})))
      << "expected [[30, 50], [20, 40]], saw " << batch->image_sizes;
}

TEST(DataLoaderTest, CollateRecordsSizesAndPadsLabelMapsWithIgnoreAndMapsWithTheirValue) {
  std::vector<core::Sample> samples(2);
  samples[0].image = cv::Mat(2, 3, CV_8UC3, cv::Scalar(0, 0, 0));
  samples[1].image = cv::Mat(4, 2, CV_8UC3, cv::Scalar(0, 0, 0));
  samples[0].semantic = cv::Mat(2, 3, CV_8U, cv::Scalar(7));
  samples[1].semantic = cv::Mat(4, 2, CV_8U, cv::Scalar(3));
  PaddedMapAndCounts generator;
  for (core::Sample& s : samples) ASSERT_TRUE(generator.Generate(&s).ok());
  CollateOptions options;
  options.targets = &generator;
  auto batch = Collate(std::move(samples), options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(at::equal(batch->image_sizes, at::tensor({2, 3, 4, 2}, at::kLong).view({2, 2})));
  const at::Tensor semantic = batch->targets.at("semantic");
  ASSERT_EQ(semantic.scalar_type(), at::kByte);
  ASSERT_EQ(semantic.sizes(), (at::IntArrayRef{2, 4, 3}));
  // Image 0: 6 pixels of 7, 6 of padding; image 1: 8 of 3, 4 of padding.
  EXPECT_EQ((semantic[0] == 7).sum().item<int64_t>(), 6);
  EXPECT_EQ((semantic[0] == core::kIgnoreLabel).sum().item<int64_t>(), 6);
  EXPECT_EQ((semantic[1] == 3).sum().item<int64_t>(), 8);
  EXPECT_EQ(semantic[1][3][2].item<uint8_t>(), core::kIgnoreLabel);
  const at::Tensor d = batch->targets.at("d");
  EXPECT_EQ((d == 2.0f).sum().item<int64_t>(), 6 + 8);
  EXPECT_EQ((d == -1.0f).sum().item<int64_t>(), 6 + 4);
}

TEST(DataLoaderTest, CollateRejectsLabelMapsOnSomeSamplesOnly) {
  std::vector<core::Sample> samples(2);
  samples[1].image_path = "b.png";
  for (core::Sample& s : samples) s.image = cv::Mat(4, 4, CV_8UC3, cv::Scalar(0, 0, 0));
  samples[0].semantic = cv::Mat(4, 4, CV_8U, cv::Scalar(1));
  auto batch = Collate(samples);
  EXPECT_THAT(batch.status().message(), HasSubstr("b.png has no label map where the batch's first sample has one"));
  samples[1].semantic = cv::Mat(3, 4, CV_8U, cv::Scalar(1));
  batch = Collate(samples);
  EXPECT_THAT(batch.status().message(), HasSubstr("b.png: the label map must be 8-bit and of the image's size (4x4)"));
}

TEST(DataLoaderTest, PerImageTargetsAreMadeInTheWorkersAndKeptPerImage) {
  FakeDataset dataset(6);
  LoaderOptions options;
  options.batch_size = 3;
  options.num_workers = 2;
  DataLoader loader(dataset, {}, std::make_shared<PaddedMapAndCounts>(), options);
  loader.StartEpoch(0, {0, 1, 2, 3, 4, 5});
  int batches = 0;
  while (true) {
    auto batch = loader.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    if (!batch->has_value()) break;
    const core::Batch& b = **batch;
    ASSERT_EQ(b.instances.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      // FakeDataset's images are 8 rows high.
      EXPECT_TRUE(at::equal(b.instances[i].at("rows"), at::full({8 % 3 + 1}, 8, at::kLong)));
    }
    EXPECT_TRUE(at::equal(b.image_sizes.select(1, 0), at::full({3}, 8, at::kLong)));
    ++batches;
  }
  EXPECT_EQ(batches, 2);
}

TEST(BatchTest, ToMovesEveryTensorAndKeepsSizesOnTheHost) {
  core::Batch batch;
  batch.images = at::zeros({1, 3, 2, 2}, at::kDouble);
  batch.image_sizes = at::tensor({2, 2}, at::kLong).view({1, 2});
  batch.targets["m"] = at::ones({1, 2, 2});
  batch.instances = {{{"boxes", at::zeros({0, 4})}}};
  // The meta device moves tensors without memory: what moved shows in .device().
  batch.To(c10::Device(c10::DeviceType::Meta));
  EXPECT_TRUE(batch.images.is_meta());
  EXPECT_TRUE(batch.targets.at("m").is_meta());
  EXPECT_TRUE(batch.instances[0].at("boxes").is_meta());
  EXPECT_TRUE(batch.image_sizes.device().is_cpu());
}

TEST(BatchTest, SplitByCollatedSizeGivesWhatCollatingEachSizeAloneGives) {
  // Sizes 8x6, 8x7, 8x6, 5x7, 8x7: three groups, in the order of their first image. Sample 3
  // was padded by an augmentation (its picture is 4x6): that padding is its own and stays.
  auto make = [](std::vector<int> which) {
    std::vector<core::Sample> samples;
    PaddedMapAndCounts generator;
    const int rows[] = {8, 8, 8, 5, 8}, cols[] = {6, 7, 6, 7, 7};
    for (int i : which) {
      core::Sample s;
      s.image_path = absl::StrCat("img_", i, ".jpg");
      s.image = cv::Mat(rows[i], cols[i], CV_8UC3, cv::Scalar(10 * i, 10 * i + 1, 10 * i + 2));
      s.semantic = cv::Mat(rows[i], cols[i], CV_8U, cv::Scalar(i));
      if (i == 3) s.size_before_padding = cv::Size(6, 4);
      EXPECT_TRUE(generator.Generate(&s).ok());
      samples.push_back(std::move(s));
    }
    return samples;
  };
  PaddedMapAndCounts generator;
  CollateOptions options;
  options.targets = &generator;
  auto whole = Collate(make({0, 1, 2, 3, 4}), options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  whole->instances = {{{"i", at::full({1}, 0)}}, {{"i", at::full({1}, 1)}},
                      {{"i", at::full({1}, 2)}}, {{"i", at::full({1}, 3)}},
                      {{"i", at::full({1}, 4)}}};
  std::vector<core::Batch> parts = core::SplitByCollatedSize(std::move(*whole));
  const std::vector<std::vector<int>> groups = {{0, 2}, {1, 4}, {3}};
  ASSERT_EQ(parts.size(), groups.size()) << "expected one part per collated size";
  for (size_t g = 0; g < groups.size(); ++g) {
    auto alone = Collate(make(groups[g]), options);
    ASSERT_TRUE(alone.ok()) << alone.status();
    const core::Batch& part = parts[g];
    EXPECT_TRUE(at::equal(part.images, alone->images))
        << "part " << g << ": images " << part.images.sizes() << ", collated alone "
        << alone->images.sizes();
    EXPECT_TRUE(at::equal(part.image_sizes, alone->image_sizes))
        << "part " << g << ": image_sizes " << part.image_sizes << ", alone " << alone->image_sizes;
    ASSERT_EQ(part.targets.size(), alone->targets.size());
    for (const auto& [name, tensor] : alone->targets) {
      EXPECT_TRUE(at::equal(part.targets.at(name), tensor)) << "part " << g << ", target " << name;
    }
    EXPECT_EQ(part.collated_sizes, alone->collated_sizes) << "part " << g;
    ASSERT_EQ(part.samples.size(), groups[g].size());
    ASSERT_EQ(part.instances.size(), groups[g].size());
    for (size_t k = 0; k < groups[g].size(); ++k) {
      EXPECT_EQ(part.samples[k].image_path, absl::StrCat("img_", groups[g][k], ".jpg"));
      EXPECT_EQ(part.instances[k].at("i").item<float>(), groups[g][k]);
    }
  }
  // One size: the batch comes back whole.
  auto same = Collate(make({0, 2}), options);
  ASSERT_TRUE(same.ok()) << same.status();
  const void* data = same->images.data_ptr();
  parts = core::SplitByCollatedSize(std::move(*same));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].images.data_ptr(), data) << "a batch of one size is not copied";
}

TEST(BatchMemoryPoolTest, ReusesFreedBuffersThatFitAndKeepsAtMostTheLimit) {
  auto pool = std::make_shared<BatchMemoryPool>(/*max_free_buffers=*/2);
  at::Tensor a = pool->NewTensor({10, 100}, at::kFloat, /*zero=*/true);
  EXPECT_EQ(a.sum().item<float>(), 0.0f);
  a.fill_(7.0f);
  const void* a_data = a.data_ptr();
  a.reset();
  EXPECT_EQ(pool->free_buffers(), 1);
  // 3000 bytes fit in a's 4000; zeroing is asked for and done.
  at::Tensor b = pool->NewTensor({3000}, at::kByte, /*zero=*/true);
  EXPECT_EQ(b.data_ptr(), a_data);
  EXPECT_EQ(b.sum().item<int64_t>(), 0);
  at::Tensor c = pool->NewTensor({2000}, at::kFloat, /*zero=*/false);  // nothing free: new
  at::Tensor d = pool->NewTensor({10}, at::kFloat, /*zero=*/false);
  EXPECT_NE(c.data_ptr(), b.data_ptr());
  const void* d_data = d.data_ptr();
  b.reset();
  d.reset();
  // 20 bytes would use less than half of d's 64: new memory.
  at::Tensor e = pool->NewTensor({5}, at::kFloat, /*zero=*/false);
  EXPECT_NE(e.data_ptr(), d_data);
  c.reset();  // b's and d's buffers are kept; c's and e's, beyond the limit, are released
  e.reset();
  EXPECT_EQ(pool->free_buffers(), 2);
  // A tensor keeps its pool alive.
  at::Tensor f = pool->NewTensor({4}, at::kFloat, /*zero=*/true);
  pool.reset();
  f.fill_(1.0f);
  EXPECT_EQ(f.sum().item<float>(), 4.0f);
}

TEST(DataLoaderTest, BatchMemoryIsReusedAcrossBatches) {
  FakeDataset dataset(12);
  LoaderOptions options;
  options.batch_size = 3;
  options.num_workers = 0;
  DataLoader loader(dataset, {}, std::make_shared<FirstChannel>(), options);
  loader.StartEpoch(0, Range(12));
  std::set<const void*> pointers;
  for (int b = 0; b < 4; ++b) {
    auto batch = loader.Next();
    ASSERT_TRUE(batch.ok() && batch->has_value());
    pointers.insert((*batch)->images.data_ptr());
    // Each batch is dropped here, so the next one can take its memory.
  }
  EXPECT_LT(pointers.size(), 4u);
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
    options.max_bad_sample_fraction = 0.2;
    DataLoader skipping(dataset, {}, nullptr, options);
    skipping.StartEpoch(0, {0, 1, 4, 5, 2, 3});
    int images = 0;
    while (true) {
      auto batch = skipping.Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      if (!batch->has_value()) break;
      images += (*batch)->images.size(0);
    }
    // The batch of the bad sample was filled up from the next sample.
    EXPECT_EQ(images, 6);
    EXPECT_EQ(skipping.skipped_samples(), 1);
  }
}

// The image paths of every batch of an epoch over `indices`, from batch `first_batch` on.
absl::StatusOr<std::vector<std::vector<std::string>>> Epoch(const core::Dataset& dataset,
                                                            LoaderOptions options,
                                                            std::vector<int64_t> indices,
                                                            int64_t first_batch = 0,
                                                            int64_t* skipped = nullptr) {
  DataLoader loader(dataset, {}, nullptr, options);
  loader.StartEpoch(3, std::move(indices), first_batch);
  std::vector<std::vector<std::string>> batches;
  while (true) {
    VISION_ASSIGN_OR_RETURN(std::optional<core::Batch> batch, loader.Next());
    if (!batch.has_value()) break;
    std::vector<std::string> paths;
    for (const core::Sample& s : batch->samples) paths.push_back(s.image_path);
    EXPECT_EQ(batch->images.size(0), static_cast<int64_t>(paths.size()));
    batches.push_back(paths);
  }
  if (skipped != nullptr) *skipped = loader.skipped_samples();
  return batches;
}

using Batches = std::vector<std::vector<std::string>>;

TEST(DataLoaderTest, SkipFillsTheBatchFromTheFollowingSamplesOfTheShare) {
  FakeDataset dataset(6, /*bad=*/4);
  for (int workers : {0, 2}) {
    LoaderOptions options;
    options.skip_bad_samples = true;
    options.max_bad_sample_fraction = 0.2;
    options.num_workers = workers;
    // Batch size 1: the bad sample's batch takes the next sample instead of ending training.
    options.batch_size = 1;
    int64_t skipped = 0;
    auto one = Epoch(dataset, options, {0, 1, 4, 5, 2, 3}, 0, &skipped);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(*one, (Batches{{"img_0.jpg"},
                             {"img_1.jpg"},
                             {"img_5.jpg"},
                             {"img_5.jpg"},
                             {"img_2.jpg"},
                             {"img_3.jpg"}}));
    EXPECT_EQ(skipped, 1);
    // Batches of 2, the bad sample in the middle: the same number of batches, all full.
    options.batch_size = 2;
    auto two = Epoch(dataset, options, {0, 1, 4, 5, 2, 3});
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(*two, (Batches{{"img_0.jpg", "img_1.jpg"},
                             {"img_5.jpg", "img_2.jpg"},
                             {"img_2.jpg", "img_3.jpg"}}));
    // At the end of the share the filling wraps to its start: the last batch stays full, so
    // ranks whose shares hold different numbers of bad samples still run the same steps.
    auto last = Epoch(dataset, options, {0, 1, 2, 3, 5, 4});
    ASSERT_TRUE(last.ok()) << last.status();
    EXPECT_EQ(*last, (Batches{{"img_0.jpg", "img_1.jpg"},
                              {"img_2.jpg", "img_3.jpg"},
                              {"img_5.jpg", "img_0.jpg"}}));
    // Resuming at a batch gives the batches of the uninterrupted epoch from there on.
    auto resumed = Epoch(dataset, options, {0, 1, 4, 5, 2, 3}, /*first_batch=*/1);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(*resumed, Batches(two->begin() + 1, two->end()));
  }
}

// Evaluation (refill_skipped off): a bad sample is left out, never replaced by one that would
// then be scored twice; a batch of bad samples only is passed over.
TEST(DataLoaderTest, SkipWithoutRefillLeavesBadSamplesOutAndNothingTwice) {
  FakeDataset dataset(6, /*bad=*/4);
  for (int workers : {0, 2}) {
    LoaderOptions options;
    options.skip_bad_samples = true;
    options.refill_skipped = false;
    options.max_bad_sample_fraction = 0.5;
    options.num_workers = workers;
    options.drop_last = false;
    options.batch_size = 2;
    int64_t skipped = 0;
    auto two = Epoch(dataset, options, {0, 1, 4, 5, 2, 3}, 0, &skipped);
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(*two, (Batches{{"img_0.jpg", "img_1.jpg"}, {"img_5.jpg"}, {"img_2.jpg", "img_3.jpg"}}));
    EXPECT_EQ(skipped, 1);
    options.batch_size = 1;
    auto one = Epoch(dataset, options, {0, 4, 1});
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(*one, (Batches{{"img_0.jpg"}, {"img_1.jpg"}}));
  }
}

TEST(DataLoaderTest, SkipStopsWhenTooManySamplesAreBadNamingThem) {
  FakeDataset dataset(6, /*bad=*/4);
  LoaderOptions options;
  options.skip_bad_samples = true;  // default share: 1%, and 1 of 6 is more
  options.batch_size = 2;
  auto epoch = Epoch(dataset, options, {0, 1, 4, 5, 2, 3});
  ASSERT_FALSE(epoch.ok());
  EXPECT_EQ(epoch.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(epoch.status().message(), HasSubstr("1 of the 6 samples"));
  EXPECT_THAT(epoch.status().message(), HasSubstr("max_bad_sample_fraction (0.01)"));
  EXPECT_THAT(epoch.status().message(), HasSubstr("sample 4: img_4.jpg: cannot decode"));
  // 1 in 100 is within 1%.
  FakeDataset big(100, /*bad=*/7);
  std::vector<int64_t> all = Range(100);
  auto fine = Epoch(big, options, all);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->size(), 50u);
}

// Sample i: a `sizes[i]` (width x height) image filled with i, whose size ImageSize states
// without decoding (counting the calls), or fails to state (`fail_sizes`); sample `bad` fails to
// load.
class ShapedDataset : public core::Dataset {
 public:
  explicit ShapedDataset(std::vector<cv::Size> sizes, int64_t bad = -1, bool fail_sizes = false)
      : sizes_(std::move(sizes)), bad_(bad), fail_sizes_(fail_sizes) {}
  int64_t Size() const override { return static_cast<int64_t>(sizes_.size()); }
  absl::StatusOr<core::Sample> Load(int64_t index) const override {
    if (index == bad_) {
      return absl::DataLossError(absl::StrCat("img_", index, ".jpg: cannot decode"));
    }
    core::Sample s;
    s.image_path = absl::StrCat("img_", index, ".jpg");
    s.image = cv::Mat(sizes_[index], CV_8UC3, cv::Scalar(index, index, index));
    return s;
  }
  std::string Describe() const override { return "shaped"; }
  absl::StatusOr<cv::Size> ImageSize(int64_t index) const override {
    ++size_calls_;
    if (fail_sizes_) return absl::NotFoundError(absl::StrCat("img_", index, ".jpg: no such file"));
    return sizes_[index];
  }
  int64_t size_calls() const { return size_calls_.load(); }

 private:
  std::vector<cv::Size> sizes_;
  int64_t bad_;
  bool fail_sizes_;
  mutable std::atomic<int64_t> size_calls_{0};
};

const cv::Size kLandscape(8, 6), kPortrait(6, 8), kSquare(6, 6), kWide(12, 6);

// Paths of dataset indices, batch by batch.
Batches Paths(const std::vector<std::vector<int64_t>>& batches) {
  Batches paths;
  for (const auto& batch : batches) {
    paths.emplace_back();
    for (int64_t i : batch) paths.back().push_back(absl::StrCat("img_", i, ".jpg"));
  }
  return paths;
}

TEST(DataLoaderTest, AspectRatioGroupingBatchesAsTorchvisionsGroupedBatchSampler) {
  // k = 0: two groups, portrait (width / height < 1) and the rest.
  ShapedDataset dataset({kLandscape, kPortrait, kPortrait, kSquare, kLandscape, kPortrait, kWide});
  for (int workers : {0, 2}) {
    LoaderOptions options;
    options.batch_size = 2;
    options.num_workers = workers;
    options.drop_last = false;  // grouping gives 8 / 2 batches regardless
    options.aspect_ratio_group_factor = 0;
    // A padded split: 6 comes twice. Worked by hand: [6, 0], [1, 5] and [3, 4] fill up on the
    // way; left are 2 (portrait, whose buffer torchvision's dict re-made at position 4) and 6
    // (re-made at 5), one each; the one missing batch is the older key's, completed with the
    // portrait group's first index: [2, 1].
    const std::vector<int64_t> order = {6, 1, 0, 3, 5, 4, 2, 6};
    auto batches = Epoch(dataset, options, order);
    ASSERT_TRUE(batches.ok()) << batches.status();
    EXPECT_EQ(*batches, (Batches{{"img_6.jpg", "img_0.jpg"},
                                 {"img_1.jpg", "img_5.jpg"},
                                 {"img_3.jpg", "img_4.jpg"},
                                 {"img_2.jpg", "img_1.jpg"}}));
  }
  // A longer share at the recipe's k = 3 equals GroupedBatches (aspect_ratio_groups_test holds
  // that to torchvision's code), with any number of threads.
  std::vector<cv::Size> sizes;
  const cv::Size shapes[] = {kLandscape, kPortrait, kSquare, kWide, cv::Size(7, 6)};
  for (int i = 0; i < 40; ++i) sizes.push_back(shapes[(i * i + i / 3) % 5]);
  ShapedDataset many(sizes);
  std::vector<int64_t> order = Range(37);
  order.push_back(order[0]);
  absl::StatusOr<std::vector<int>> groups = AspectRatioGroups(many, 3);
  ASSERT_TRUE(groups.ok()) << groups.status();
  absl::StatusOr<std::vector<std::vector<int64_t>>> expected = GroupedBatches(order, *groups, 3);
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (int workers : {0, 3}) {
    LoaderOptions options;
    options.batch_size = 3;
    options.num_workers = workers;
    options.aspect_ratio_group_factor = 3;
    DataLoader loader(many, {}, nullptr, options);
    const int64_t calls_before = many.size_calls();
    for (int64_t epoch : {0, 1}) {
      loader.StartEpoch(epoch, order);
      EXPECT_EQ(loader.num_batches(), 38 / 3);
      Batches paths;
      while (true) {
        auto batch = loader.Next();
        ASSERT_TRUE(batch.ok()) << batch.status();
        if (!batch->has_value()) break;
        paths.emplace_back();
        for (const core::Sample& s : (*batch)->samples) paths.back().push_back(s.image_path);
      }
      EXPECT_EQ(paths, Paths(*expected)) << "workers " << workers << ", epoch " << epoch;
    }
    // The sizes are asked once per loader, not per epoch.
    EXPECT_EQ(many.size_calls() - calls_before, 40);
  }
}

TEST(DataLoaderTest, AspectRatioGroupingResumesExactly) {
  std::vector<cv::Size> sizes;
  const cv::Size shapes[] = {kLandscape, kPortrait, kSquare, kWide};
  for (int i = 0; i < 30; ++i) sizes.push_back(shapes[(i * 7 + i / 4) % 4]);
  // With a bad sample under SKIP too: its batch is filled up from the grouped order.
  for (int64_t bad : {-1, 9}) {
    ShapedDataset dataset(sizes, bad);
    LoaderOptions options;
    options.batch_size = 4;
    options.num_workers = 2;
    options.aspect_ratio_group_factor = 3;
    options.skip_bad_samples = true;
    options.max_bad_sample_fraction = 0.1;
    const std::vector<int64_t> order = Range(29);
    auto full = Epoch(dataset, options, order);
    ASSERT_TRUE(full.ok()) << full.status();
    ASSERT_EQ(full->size(), 29u / 4);
    for (int64_t first = 1; first <= static_cast<int64_t>(full->size()); ++first) {
      auto resumed = Epoch(dataset, options, order, first);
      ASSERT_TRUE(resumed.ok()) << resumed.status();
      EXPECT_EQ(*resumed, Batches(full->begin() + first, full->end()))
          << "bad " << bad << ", from " << first;
    }
  }
}

TEST(DataLoaderTest, AspectRatioGroupingOffKeepsTheShareOrderAndAsksNoSizes) {
  EXPECT_EQ(LoaderOptions().aspect_ratio_group_factor, -1);
  ShapedDataset dataset({kLandscape, kPortrait, kSquare, kPortrait, kWide}, -1,
                        /*fail_sizes=*/true);
  LoaderOptions options;
  options.batch_size = 2;
  options.drop_last = false;
  auto batches = Epoch(dataset, options, {4, 0, 3, 1, 2});
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(*batches,
            (Batches{{"img_4.jpg", "img_0.jpg"}, {"img_3.jpg", "img_1.jpg"}, {"img_2.jpg"}}));
  EXPECT_EQ(dataset.size_calls(), 0);
  EXPECT_EQ(NumBatches(options, 5), 3);
  options.aspect_ratio_group_factor = 0;
  EXPECT_EQ(NumBatches(options, 5), 2);
}

TEST(DataLoaderTest, AspectRatioGroupingErrorsComeFromNext) {
  ShapedDataset unsized({kLandscape, kPortrait}, -1, /*fail_sizes=*/true);
  LoaderOptions options;
  options.batch_size = 1;
  options.aspect_ratio_group_factor = 3;
  auto failed = Epoch(unsized, options, {0, 1});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(failed.status().message(),
              HasSubstr("aspect-ratio grouping: the size of sample 0: img_0.jpg: no such file"));
  ShapedDataset dataset({kLandscape, kPortrait});
  options.aspect_ratio_group_factor = -2;
  auto bad_factor = Epoch(dataset, options, {0, 1});
  EXPECT_EQ(bad_factor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_factor.status().message(), HasSubstr("aspect_ratio_group_factor must be"));
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
