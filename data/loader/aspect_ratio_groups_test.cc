#include "data/loader/aspect_ratio_groups.h"

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Images of given sizes that it states without decoding: Load fails.
class SizesOnly : public core::Dataset {
 public:
  explicit SizesOnly(std::vector<cv::Size> sizes) : sizes_(std::move(sizes)) {}
  int64_t Size() const override { return static_cast<int64_t>(sizes_.size()); }
  absl::StatusOr<core::Sample> Load(int64_t index) const override {
    return absl::InternalError(absl::StrCat("decoded sample ", index));
  }
  std::string Describe() const override { return "sizes"; }
  absl::StatusOr<cv::Size> ImageSize(int64_t index) const override { return sizes_[index]; }

 private:
  std::vector<cv::Size> sizes_;
};

// Images that only Load knows the size of (the default ImageSize decodes).
class DecodeOnly : public core::Dataset {
 public:
  int64_t Size() const override { return 3; }
  absl::StatusOr<core::Sample> Load(int64_t index) const override {
    if (index == 2) return absl::DataLossError("img_2.jpg: cannot decode");
    core::Sample s;
    s.image = index == 0 ? cv::Mat(4, 8, CV_8UC3) : cv::Mat(8, 4, CV_8UC3);
    return s;
  }
  std::string Describe() const override { return "decode"; }
};

struct GoldenCase {
  std::string name;
  int k = 0;
  int batch_size = 0;
  std::vector<double> edges;
  std::vector<cv::Size> sizes;
  std::vector<int64_t> order;
  std::vector<int> groups;
  std::vector<std::vector<int64_t>> batches;
};

// testdata/grouped_batches_golden.txt, made by testdata/make_grouped_batches_golden.py from
// torchvision's create_aspect_ratio_groups and GroupedBatchSampler (format in its docstring).
std::vector<GoldenCase> ReadGolden() {
  const std::string path = "data/loader/testdata/grouped_batches_golden.txt";
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot open " << path;
  std::stringstream tokens;
  for (std::string line; std::getline(file, line);) {
    if (!line.empty() && line[0] != '#') tokens << line << "\n";
  }
  std::vector<GoldenCase> cases;
  auto expect = [&](const std::string& word) {
    std::string got;
    tokens >> got;
    EXPECT_EQ(got, word) << "in " << path << ", case " << cases.size();
    size_t n = 0;
    tokens >> n;
    return n;
  };
  std::string word;
  while (tokens >> word) {
    EXPECT_EQ(word, "case");
    GoldenCase c;
    tokens >> c.name >> c.k >> c.batch_size;
    c.edges.resize(expect("edges"));
    for (double& e : c.edges) {
      std::string text;
      tokens >> text;
      e = std::stod(text);  // strtod: the nearest double, which Python's repr names exactly
    }
    c.sizes.resize(expect("sizes"));
    for (cv::Size& s : c.sizes) tokens >> s.width >> s.height;
    c.order.resize(expect("order"));
    for (int64_t& i : c.order) tokens >> i;
    c.groups.resize(expect("groups"));
    for (int& g : c.groups) tokens >> g;
    c.batches.resize(expect("batches"));
    for (auto& batch : c.batches) {
      size_t n = 0;
      tokens >> n;
      batch.resize(n);
      for (int64_t& i : batch) tokens >> i;
    }
    if (tokens.fail()) {
      ADD_FAILURE() << path << ": case " << c.name << " is cut short";
      break;
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(AspectRatioGroupsTest, EqualsTorchvisionsGroupedBatchSampler) {
  const std::vector<GoldenCase> cases = ReadGolden();
  ASSERT_EQ(cases.size(), 31u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::vector<double>> edges = AspectRatioBinEdges(c.k);
    ASSERT_TRUE(edges.ok()) << edges.status();
    EXPECT_EQ(*edges, c.edges);  // the same doubles, bit for bit
    SizesOnly dataset(c.sizes);
    absl::StatusOr<std::vector<int>> groups = AspectRatioGroups(dataset, c.k);
    ASSERT_TRUE(groups.ok()) << groups.status();
    EXPECT_EQ(*groups, c.groups);
    absl::StatusOr<std::vector<std::vector<int64_t>>> batches =
        GroupedBatches(c.order, *groups, c.batch_size);
    ASSERT_TRUE(batches.ok()) << batches.status();
    EXPECT_EQ(*batches, c.batches);
  }
}

TEST(AspectRatioGroupsTest, EndOfEpochFillByHand) {
  // Batch 3, two groups: 0 fills a batch at position 3 and moves behind 1 in torchvision's
  // dict of buffers; both end with two indices, so group 1 (now the older key) is completed,
  // from its first index.
  const std::vector<int> group_of = {0, 1, 0, 0, 0, 1, 0};
  absl::StatusOr<std::vector<std::vector<int64_t>>> batches =
      GroupedBatches({0, 1, 2, 3, 4, 5, 6}, group_of, 3);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_THAT(*batches, ElementsAre(ElementsAre(0, 2, 3), ElementsAre(1, 5, 1)));
}

TEST(AspectRatioGroupsTest, EdgesOfFactorZeroAndThree) {
  EXPECT_THAT(*AspectRatioBinEdges(0), ElementsAre(1.0));
  const std::vector<double> edges = *AspectRatioBinEdges(3);
  ASSERT_EQ(edges.size(), 7u);
  EXPECT_EQ(edges.front(), 0.5);
  EXPECT_EQ(edges[3], 1.0);
  EXPECT_EQ(edges.back(), 2.0);
  // bisect_right: a ratio equal to an edge goes above it.
  EXPECT_EQ(AspectRatioGroup(1, 1, edges), 4);
  EXPECT_EQ(AspectRatioGroup(1, 2, edges), 1);
  EXPECT_EQ(AspectRatioGroup(2, 1, edges), 7);
  EXPECT_EQ(AspectRatioGroup(1, 3, edges), 0);
}

TEST(AspectRatioGroupsTest, BadValuesAreErrors) {
  for (int k : {-1, -2, kMaxAspectRatioGroupFactor + 1}) {
    absl::StatusOr<std::vector<double>> edges = AspectRatioBinEdges(k);
    EXPECT_EQ(edges.status().code(), absl::StatusCode::kInvalidArgument) << k;
    EXPECT_THAT(edges.status().message(), HasSubstr("aspect_ratio_group_factor")) << k;
  }
  absl::StatusOr<std::vector<std::vector<int64_t>>> outside = GroupedBatches({0, 3}, {0, 0}, 1);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.status().message(), HasSubstr("index 3 at position 1"));
  EXPECT_FALSE(GroupedBatches({0}, {0}, 0).ok());
  SizesOnly empty_image({cv::Size(4, 3), cv::Size(0, 3)});
  absl::StatusOr<std::vector<int>> groups = AspectRatioGroups(empty_image, 3);
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(groups.status().message(), HasSubstr("sample 1 has size 0x3"));
}

TEST(AspectRatioGroupsTest, DatasetsThatDoNotStateSizesAreDecoded) {
  DecodeOnly dataset;
  absl::StatusOr<cv::Size> size = dataset.ImageSize(0);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, cv::Size(8, 4));
  absl::StatusOr<std::vector<int>> groups = AspectRatioGroups(dataset, 0);
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(groups.status().message(), HasSubstr("the size of sample 2: img_2.jpg"));
}

}  // namespace
}  // namespace vision::data
