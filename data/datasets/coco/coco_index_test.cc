// The compact COCO index and its cache: every annotation reads back as the former reader
// (coco_reference_reader.h) read it, from the JSON and from the cache; bad files give the
// former messages; stale, truncated, older and damaged caches (a bit flipped anywhere, a
// zeroed tail, a writer's bad index) are never used but rebuilt to the same bytes; a cache
// directory on a read-only file system (a private mount namespace) or otherwise unusable falls
// back to another directory or to memory, and two processes build one cache.
#include "data/datasets/coco/coco_index.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/sample.h"
#include "data/datasets/coco/coco.pb.h"
#include "data/datasets/coco/coco_dataset.h"
#include "data/datasets/coco/coco_reference_reader.h"
#include "data/synthetic/coco/coco_scale.h"

namespace vision::data::datasets::coco {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kRoot[] = "testdata/coco";

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(base != nullptr ? base : "/tmp") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

CocoOptions Options(const std::string& root, const std::string& json) {
  CocoOptions options;
  options.set_root(root);
  options.set_annotation_file(json);
  options.set_image_dir("images");
  return options;
}

// Options that cache any file in `cache_dir`.
CocoOptions Cached(CocoOptions options, const std::string& cache_dir) {
  options.set_cache_min_bytes(0);
  options.set_cache_dir(cache_dir);
  return options;
}

CocoOptions Uncached(CocoOptions options) {
  options.set_cache(CocoOptions::OFF);
  return options;
}

std::unique_ptr<CocoDataset> Open(const CocoOptions& options) {
  absl::StatusOr<std::unique_ptr<CocoDataset>> dataset = CocoDataset::Create(options);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? std::move(*dataset) : nullptr;
}

void ExpectSameObject(const core::ObjectInstance& got, const core::ObjectInstance& want,
                      const std::string& where) {
  EXPECT_EQ(got.annotation_id, want.annotation_id) << where;
  EXPECT_EQ(got.label, want.label) << where;
  EXPECT_EQ(got.is_crowd, want.is_crowd) << where;
  // Exact float equality: both sides round the same doubles once.
  EXPECT_EQ(got.box.x, want.box.x) << where;
  EXPECT_EQ(got.box.y, want.box.y) << where;
  EXPECT_EQ(got.box.width, want.box.width) << where;
  EXPECT_EQ(got.box.height, want.box.height) << where;
  ASSERT_EQ(got.polygons.size(), want.polygons.size()) << where;
  for (size_t p = 0; p < got.polygons.size(); ++p) {
    ASSERT_EQ(got.polygons[p].size(), want.polygons[p].size()) << where << " polygon " << p;
    for (size_t k = 0; k < got.polygons[p].size(); ++k) {
      EXPECT_EQ(got.polygons[p][k].x, want.polygons[p][k].x) << where;
      EXPECT_EQ(got.polygons[p][k].y, want.polygons[p][k].y) << where;
    }
  }
  EXPECT_EQ(got.rle.height, want.rle.height) << where;
  EXPECT_EQ(got.rle.width, want.rle.width) << where;
  EXPECT_EQ(got.rle.counts, want.rle.counts) << where;
}

struct Counts {
  int64_t objects = 0, polygons = 0, rle_counts_list = 0, rle_string = 0, crowd = 0;
};

// The dataset reads what the reference reads, sample by sample, object by object.
void ExpectSameAsReference(const CocoDataset& dataset, const ReferenceCoco& reference,
                           Counts* counts = nullptr) {
  EXPECT_EQ(dataset.class_names(), reference.class_names);
  EXPECT_EQ(dataset.category_ids(), reference.category_ids);
  ASSERT_EQ(dataset.Size(), static_cast<int64_t>(reference.images.size()));
  for (int64_t i = 0; i < dataset.Size(); ++i) {
    const ReferenceImage& image = reference.images[i];
    ASSERT_EQ(dataset.ImageId(i), image.id);
    const std::vector<core::ObjectInstance> objects = dataset.Objects(i);
    ASSERT_EQ(objects.size(), image.objects.size()) << "image " << image.id;
    for (size_t k = 0; k < objects.size(); ++k) {
      ExpectSameObject(objects[k], image.objects[k],
                       absl::StrCat("image ", image.id, " object ", k));
      if (counts != nullptr) {
        ++counts->objects;
        counts->polygons += !objects[k].polygons.empty();
        counts->crowd += objects[k].is_crowd;
      }
    }
  }
}

TEST(CocoIndexTest, TestdataReadsAsBeforeFromJsonAndFromCache) {
  const std::string cache_dir = TempDir("testdata_cache");
  for (const char* json :
       {"annotations/instances_tiny.json", "annotations/instances_tiny_coco80.json"}) {
    for (const auto empty : {CocoOptions::KEEP, CocoOptions::SKIP}) {
      for (const bool keep_crowd : {true, false}) {
        SCOPED_TRACE(absl::StrCat(json, " empty_images=", empty, " keep_crowd=", keep_crowd));
        CocoOptions options = Options(kRoot, json);
        options.set_empty_images(empty);
        options.set_keep_crowd(keep_crowd);
        absl::StatusOr<ReferenceCoco> reference = ReadCocoReference(options);
        ASSERT_TRUE(reference.ok()) << reference.status();
        for (const CocoOptions& variant :
             {Uncached(options), Cached(options, cache_dir), Cached(options, cache_dir)}) {
          std::unique_ptr<CocoDataset> dataset = Open(variant);
          ASSERT_NE(dataset, nullptr);
          ExpectSameAsReference(*dataset, *reference);
          // Load (with the image) hands out the same objects.
          for (int64_t i = 0; i < dataset->Size(); ++i) {
            absl::StatusOr<core::Sample> sample = dataset->Load(i);
            ASSERT_TRUE(sample.ok()) << sample.status();
            ASSERT_EQ(sample->objects.size(), reference->images[i].objects.size());
          }
        }
      }
    }
  }
  // The second cached open of each file mapped what the first one built.
  CocoOptions options = Cached(Options(kRoot, "annotations/instances_tiny.json"), cache_dir);
  EXPECT_THAT(Open(options)->index_report(), StartsWith("mapped "));
}

// A generated set with every encoding: polygons (some in several parts), crowd regions as
// run lists and as compressed strings.
class GeneratedSetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(TempDir("generated"));
    synthetic::coco::CocoScaleOptions options;
    options.num_images = 1500;
    options.crowd_fraction = 0.05;
    options.compressed_rle_fraction = 0.5;
    options.seed = 7;
    ASSERT_TRUE(synthetic::coco::WriteCocoScaleAnnotations(
                    options, (fs::path(*root_) / "instances.json").string())
                    .ok());
  }
  static std::string* root_;
};
std::string* GeneratedSetTest::root_ = nullptr;

TEST_F(GeneratedSetTest, GeneratorIsDeterministicAndShapedLikeCoco) {
  synthetic::coco::CocoScaleOptions options;
  options.num_images = 200;
  const std::string dir = TempDir("determinism");
  synthetic::coco::CocoScaleSummary first, second;
  ASSERT_TRUE(synthetic::coco::WriteCocoScaleAnnotations(options, dir + "/a.json", &first).ok());
  ASSERT_TRUE(synthetic::coco::WriteCocoScaleAnnotations(options, dir + "/b.json", &second).ok());
  std::ifstream a(dir + "/a.json"), b(dir + "/b.json");
  const std::string text_a((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  const std::string text_b((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text_a, text_b);
  EXPECT_EQ(first.bytes, static_cast<int64_t>(text_a.size()));
  // An existing file is not overwritten.
  EXPECT_EQ(synthetic::coco::WriteCocoScaleAnnotations(options, dir + "/a.json").code(),
            absl::StatusCode::kAlreadyExists);
  // About 7.3 annotations per image; COCO's 80 category ids, 1..90 with gaps.
  EXPECT_GT(first.annotations, 200 * 6);
  EXPECT_LT(first.annotations, 200 * 9);
  CocoOptions coco = Uncached(Options(dir, "a.json"));
  coco.set_empty_images(CocoOptions::KEEP);
  std::unique_ptr<CocoDataset> dataset = Open(coco);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->Size(), 200);
  ASSERT_EQ(dataset->category_ids().size(), 80u);
  EXPECT_EQ(dataset->category_ids().front(), 1);
  EXPECT_EQ(dataset->category_ids()[11], 13);  // 12 is not a COCO category
  EXPECT_EQ(dataset->category_ids().back(), 90);
  EXPECT_EQ(dataset->class_names().front(), "person");
}

TEST_F(GeneratedSetTest, EveryAnnotationReadsAsBeforeFromJsonAndFromCache) {
  CocoOptions options = Options(*root_, "instances.json");
  options.set_empty_images(CocoOptions::KEEP);
  absl::StatusOr<ReferenceCoco> reference = ReadCocoReference(options);
  ASSERT_TRUE(reference.ok()) << reference.status();
  // Both RLE encodings are in the file.
  std::ifstream file(fs::path(*root_) / "instances.json");
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_THAT(text, HasSubstr("{\"counts\":["));
  ASSERT_THAT(text, HasSubstr("{\"counts\":\""));

  const std::string cache_dir = TempDir("generated_cache");
  std::unique_ptr<CocoDataset> parsed = Open(Uncached(options));
  std::unique_ptr<CocoDataset> built = Open(Cached(options, cache_dir));
  std::unique_ptr<CocoDataset> mapped = Open(Cached(options, cache_dir));
  ASSERT_NE(mapped, nullptr);
  EXPECT_THAT(built->index_report(), StartsWith("built "));
  EXPECT_THAT(mapped->index_report(), StartsWith("mapped "));
  for (const CocoDataset* dataset : {parsed.get(), built.get(), mapped.get()}) {
    Counts counts;
    ExpectSameAsReference(*dataset, *reference, &counts);
    EXPECT_GT(counts.objects, 8000);
    EXPECT_GT(counts.polygons, 7000);
    EXPECT_GT(counts.crowd, 300);
  }
}

// A file that does not fit the format fails with the former reader's message.
TEST(CocoIndexTest, BadFilesGiveTheFormerMessages) {
  for (const auto& entry : fs::directory_iterator(fs::path(kRoot) / "bad")) {
    if (entry.path().extension() != ".json") continue;
    CocoOptions options = Options(kRoot, "bad/" + entry.path().filename().string());
    options.set_empty_images(CocoOptions::KEEP);
    absl::StatusOr<ReferenceCoco> reference = ReadCocoReference(options);
    absl::StatusOr<std::unique_ptr<CocoDataset>> dataset = CocoDataset::Create(Uncached(options));
    EXPECT_EQ(dataset.status(), reference.status()) << entry.path();
  }
}

TEST(CocoIndexTest, SyntaxErrorsNameTheByte) {
  const std::string dir = TempDir("syntax");
  std::ofstream(fs::path(dir) / "cut.json")
      << R"({"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], )"
      << R"("categories": [{"id": 1, "name": "x"}], "annotations": [{"id": 1, "image_id": 1,)";
  CocoOptions options = Uncached(Options(dir, "cut.json"));
  options.set_empty_images(CocoOptions::KEEP);
  absl::Status status = CocoDataset::Create(options).status();
  EXPECT_EQ(status, ReadCocoReference(options).status());
  EXPECT_THAT(status.message(), HasSubstr("cut.json: malformed JSON at byte "));
}

// A 200 KB file whose one segmentation is 100,000 nested empty lists once overflowed the stack
// of the error path's excerpt (nlohmann's recursive dump()) and killed the process; nesting
// beyond core::kMaxNestingDepth is now refused, naming the byte, on every path: the index, the
// reference reader, and nesting in a field the index only skips.
TEST(CocoIndexTest, DeepNestingIsAnErrorNamingTheByteNotACrash) {
  const std::string dir = TempDir("deep");
  const std::string head =
      R"({"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], )"
      R"("categories": [{"id": 1, "name": "x"}], "annotations": [{"id": 1, "image_id": 1, )"
      R"("category_id": 1, "bbox": [0, 0, 2, 2], "segmentation": )";
  const int depth = 100000;
  std::ofstream(fs::path(dir) / "deep.json")
      << head << std::string(depth, '[') << std::string(depth, ']') << "}]}";
  // The root object is depth 1, the list of annotations 2, an annotation 3: the 98th bracket
  // of the segmentation is the 101st.
  const size_t too_deep = head.size() + 97;
  CocoOptions options = Uncached(Options(dir, "deep.json"));
  options.set_empty_images(CocoOptions::KEEP);
  const absl::Status status = CocoDataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(absl::StrCat("deep.json: byte ", too_deep,
                                           ": lists and objects nest more than 100 deep")),
                    HasSubstr("COCO instances file nests at most 5 deep")));
  EXPECT_EQ(ReadCocoReference(options).status(), status);
  // At the limit the file is read, and its too-deep segmentation is reported as such.
  std::ofstream(fs::path(dir) / "limit.json")
      << head << std::string(97, '[') << std::string(97, ']') << "}]}";
  const absl::Status at_limit =
      CocoDataset::Create(Uncached(Options(dir, "limit.json"))).status();
  EXPECT_THAT(at_limit.message(), Not(HasSubstr("nest more than"))) << at_limit;
  // In a root field the reader does not use, and in the cache-building path.
  std::ofstream(fs::path(dir) / "info.json")
      << R"({"info": )" << std::string(depth, '{') << std::string(depth, '}') << ", "
      << head.substr(1) << "[]}]}";
  const absl::Status info =
      CocoDataset::Create(Cached(Options(dir, "info.json"), TempDir("deep_cache"))).status();
  EXPECT_THAT(info.message(), HasSubstr("info.json: byte 108: lists and objects nest more than"));
}

// --- Windows (see "Windows" in coco_index.cc): the file is parsed a run of list elements at a
// time; where the runs are cut must change nothing.

// The arrays as bytes, for exact comparison.
std::string Bytes(const CocoIndexArrays& a) {
  auto bytes = [](const auto& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  return absl::StrCat(bytes(a.categories), "|", bytes(a.images), "|", bytes(a.annotations), "|",
                      bytes(a.polygon_offsets), "|", bytes(a.coords), "|", bytes(a.rle_counts), "|",
                      a.names, "|", a.has_annotations);
}

// Every window size in `sizes` reads `json` as the default one does, to the byte, or fails
// with the same status; returns the default's status.
absl::Status ExpectSameForWindows(const std::string& json, const std::vector<uint64_t>& sizes) {
  CocoSourceKey key;
  absl::StatusOr<CocoIndexArrays> want = ParseCocoJson(json, &key);
  for (uint64_t window_bytes : sizes) {
    CocoSourceKey got_key;
    absl::StatusOr<CocoIndexArrays> got = ParseCocoJson(json, &got_key, window_bytes);
    EXPECT_EQ(got.status(), want.status()) << json << " window_bytes=" << window_bytes;
    if (got.ok() && want.ok()) {
      EXPECT_TRUE(Bytes(*got) == Bytes(*want)) << json << " window_bytes=" << window_bytes;
      EXPECT_EQ(got_key.content_hash, key.content_hash);
    }
  }
  return want.status();
}

std::vector<uint64_t> Range(uint64_t first, uint64_t last) {
  std::vector<uint64_t> sizes;
  for (uint64_t n = first; n <= last; ++n) sizes.push_back(n);
  return sizes;
}

TEST(CocoIndexTest, TestdataReadsTheSameWhereverTheWindowsAreCut) {
  for (const char* json :
       {"annotations/instances_tiny.json", "annotations/instances_tiny_coco80.json"}) {
    // 1 byte: a window per element; up to the longest element: cuts right after each element
    // and inside runs of every length.
    EXPECT_TRUE(ExpectSameForWindows(absl::StrCat(kRoot, "/", json), Range(1, 400)).ok());
  }
}

// Strings with brackets, braces, commas, escaped quotes and backslashes, in names, in fields the
// reader skips and in keys; nested lists; values of every JSON type at the top level; a key
// spelled with an escape. Read as the former reader reads it, with any window.
constexpr char kTricky[] =
    "\xEF\xBB\xBF{\"info\": {\"note\": \"]}[{,\\\"\\\\\", \"list\": [[1, [2]], {\"a\": [3]}]},\n"
    " \"type\": \"inst\\\"ances]\", \"year\": 2017, \"ok\": true, \"none\": null,\n"
    " \"empty\": [], \"deep\": [[[[]]], {}, \"]\", -1.5e3],\n"
    " \"imag\\u0065s\": [\n"
    "  {\"id\": 1, \"file_name\": \"a[1]{x}\\\",\\\\.png\", \"width\": 32, \"height\": 24},\n"
    "  {\"id\": 2, \"file_name\": \"b]\\\\\", \"width\": 32, \"height\": 24,"
    " \"extra\": {\"k\": [\"}\", \"\\\"]\"]}}\n"
    " ],\n"
    " \"annotations\" : [ {\"id\": 10, \"image_id\": 2, \"category_id\": 3,"
    " \"note\": \"[{\\\"\", \"bbox\": [1, 2, 3, 4],"
    " \"segmentation\": [[1, 1, 5, 1, 5, 5], [2, 2, 6, 2, 6, 6]]} ,\n"
    "  {\"id\": 11, \"image_id\": 1, \"category_id\": 1, \"iscrowd\": 1, \"bbox\": [0, 0, 2, 2],"
    " \"segmentation\": {\"size\": [24, 32], \"counts\": [0, 4, 20, 4, 740]}},"
    "{\"id\":12,\"image_id\":2,\"category_id\":3,\"bbox\":[0,0,1,1],\"segmentation\":[]}\n"
    " ],\n"
    " \"categories\": [{\"id\": 3, \"name\": \"c,\\\"]}\"}, {\"id\": 1, \"name\": \"[one]\"}]\n"
    "}\n";

TEST(CocoIndexTest, StringsWithBracketsAndEscapesReadTheSameWithAnyWindow) {
  const std::string dir = TempDir("tricky");
  std::ofstream(fs::path(dir) / "tricky.json") << kTricky;
  CocoOptions options = Uncached(Options(dir, "tricky.json"));
  options.set_empty_images(CocoOptions::KEEP);
  absl::StatusOr<ReferenceCoco> reference = ReadCocoReference(options);
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::unique_ptr<CocoDataset> dataset = Open(options);
  ASSERT_NE(dataset, nullptr);
  ExpectSameAsReference(*dataset, *reference);
  EXPECT_EQ(dataset->class_names(), (std::vector<std::string>{"[one]", "c,\"]}"}));
  EXPECT_TRUE(
      ExpectSameForWindows((fs::path(dir) / "tricky.json").string(), Range(1, sizeof(kTricky)))
          .ok());
}

TEST_F(GeneratedSetTest, ReadsTheSameWithSmallWindows) {
  // Compressed RLE strings hold backslashes and brackets.
  EXPECT_TRUE(
      ExpectSameForWindows((fs::path(*root_) / "instances.json").string(), {1, 100, 777, 65536})
          .ok());
}

// A valid file with one defect, for the syntax tests below.
std::string WithAnnotations(const std::string& annotations, const std::string& after = "}") {
  return absl::StrCat(R"({"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], )",
                      R"("categories": [{"id": 1, "name": "x"}], "annotations": )", annotations,
                      after);
}

TEST(CocoIndexTest, SyntaxErrorsAtWindowBoundariesNameTheFormerByte) {
  const std::string a1 = R"({"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1]})";
  const std::string a2 = R"({"id": 2, "image_id": 1, "category_id": 1, "bbox": [1, 1, 2, 2]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"unterminated_list", WithAnnotations(absl::StrCat("[", a1, ", ", a2), "")},
      {"unterminated_list_after_comma", WithAnnotations(absl::StrCat("[", a1, ", "), "")},
      {"unterminated_string", WithAnnotations(absl::StrCat("[", a1, R"(, {"id": 2, "na)"), "")},
      {"unterminated_escape", WithAnnotations(absl::StrCat("[", a1, R"(, {"id": "2\)"), "")},
      {"two_commas", WithAnnotations(absl::StrCat("[", a1, ",, ", a2, "]"))},
      {"trailing_comma", WithAnnotations(absl::StrCat("[", a1, ", ", a2, ",]"))},
      {"leading_comma", WithAnnotations(absl::StrCat("[, ", a1, "]"))},
      {"missing_comma", WithAnnotations(absl::StrCat("[", a1, " ", a2, "]"))},
      {"mismatched_bracket", WithAnnotations(absl::StrCat("[", a1, ", ", a2, "}"))},
      {"mismatched_inside", WithAnnotations(absl::StrCat("[", a1, R"(, {"id": 2, "b": [1}])"))},
      {"garbage_after_root", WithAnnotations(absl::StrCat("[", a1, "]"), "} x")},
      {"second_root", WithAnnotations(absl::StrCat("[", a1, "]"), "}{}")},
      {"missing_colon", R"({"images" [], "categories": [], "annotations": []})"},
      // (Not here: a misspelled literal in a field the reader skips, "x": tru; simdjson skips
      // it unread, now as when it read the whole file.)
      {"empty_file", ""},
      {"not_an_object", "[1, 2]"},
      {"valid", WithAnnotations(absl::StrCat("[", a1, ", ", a2, "]"))},
  };
  const std::string dir = TempDir("window_syntax");
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    const std::string file = name + ".json";
    std::ofstream(fs::path(dir) / file) << text;
    CocoOptions options = Uncached(Options(dir, file));
    options.set_empty_images(CocoOptions::KEEP);
    const absl::Status reference = ReadCocoReference(options).status();
    EXPECT_EQ(CocoDataset::Create(options).status(), reference);
    const absl::Status status =
        ExpectSameForWindows((fs::path(dir) / file).string(), Range(1, text.size() + 1));
    if (name == "valid") {
      EXPECT_TRUE(status.ok()) << status;
    } else if (name == "not_an_object") {
      EXPECT_THAT(status.message(), HasSubstr("the top level is not an object"));
    } else {
      EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(file, ": malformed JSON at byte ")));
    }
  }
}

// Builds a cached dataset from a copy of instances_tiny.json in a fresh directory.
class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::copy_file(fs::path(kRoot) / "annotations/instances_tiny.json",
                  fs::path(dir_) / "instances.json");
    options_ = Cached(Options(dir_, "instances.json"), (fs::path(dir_) / "cache").string());
    options_.set_empty_images(CocoOptions::KEEP);
    cache_path_ = CocoCachePath((fs::path(dir_) / "instances.json").string(),
                                (fs::path(dir_) / "cache").string());
    std::unique_ptr<CocoDataset> first = Open(options_);
    ASSERT_NE(first, nullptr);
    ASSERT_THAT(first->index_report(), StartsWith("built "));
    ASSERT_TRUE(fs::exists(cache_path_));
  }

  std::string Report() {
    std::unique_ptr<CocoDataset> dataset = Open(options_);
    return dataset == nullptr ? "" : dataset->index_report();
  }

  void Patch(uint64_t offset, const void* bytes, size_t size) {
    std::fstream file(cache_path_, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(offset));
    file.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  }

  std::string CacheBytes() const {
    std::ifstream file(cache_path_, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  }

  // Stores the checksum of the cache as it now is, as the writer would have.
  void Resign() {
    const std::string bytes = CacheBytes();
    const uint64_t checksum = CocoCacheChecksum(bytes.data(), bytes.size());
    Patch(kChecksumAt, &checksum, sizeof(checksum));
  }

  // The cache header's layout (coco_index.cc's CacheHeader, format version 4): checked
  // against the file in CacheLayoutIsAsTheTestsAssume.
  static constexpr uint64_t kChecksumAt = 56;
  static constexpr int kNumSections = 7;
  static constexpr uint64_t kOffsetsAt = 64;
  static constexpr uint64_t kBytesAt = kOffsetsAt + 8 * kNumSections;
  static constexpr uint64_t kHeaderBytes = kBytesAt + 8 * kNumSections;

  uint64_t HeaderWord(const std::string& bytes, uint64_t at) const {
    uint64_t word;
    std::memcpy(&word, bytes.data() + at, sizeof(word));
    return word;
  }

  std::string dir_;
  CocoOptions options_;
  std::string cache_path_;
};

TEST_F(CacheTest, MappedWhenValid) { EXPECT_THAT(Report(), StartsWith("mapped " + cache_path_)); }

TEST_F(CacheTest, ModifiedAnnotationFileIsDetectedEvenWithSizeAndTimeKept) {
  const fs::path json = fs::path(dir_) / "instances.json";
  struct stat before;
  ASSERT_EQ(::stat(json.c_str(), &before), 0);
  // Same size, same modification time, one digit changed (image 2's width 32 -> 31 would
  // break the annotations, so a category name letter instead).
  std::ifstream in(json);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const size_t at = text.find("\"rectangle\"");
  ASSERT_NE(at, std::string::npos);
  text[at + 1] = 'R';
  std::ofstream(json, std::ios::trunc) << text;
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, json.c_str(), times, 0), 0);

  std::unique_ptr<CocoDataset> dataset = Open(options_);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->index_report(), HasSubstr("rebuilt: stale"));
  EXPECT_EQ(dataset->class_names()[1], "Rectangle");
  EXPECT_THAT(Report(), StartsWith("mapped "));
}

TEST_F(CacheTest, TruncatedCacheIsRebuilt) {
  fs::resize_file(cache_path_, fs::file_size(cache_path_) / 2);
  EXPECT_THAT(Report(), HasSubstr("rebuilt: truncated or overwritten"));
  EXPECT_THAT(Report(), StartsWith("mapped "));
  fs::resize_file(cache_path_, 10);
  EXPECT_THAT(Report(), HasSubstr("rebuilt: truncated: 10 bytes"));
}

TEST_F(CacheTest, OlderFormatVersionIsRebuilt) {
  const uint32_t older = kCocoIndexFormatVersion - 1;
  Patch(8, &older, sizeof(older));  // after the 8 magic bytes
  EXPECT_THAT(Report(), HasSubstr(absl::StrCat("rebuilt: written by format version ", older,
                                               "; this reader's is ", kCocoIndexFormatVersion)));
}

TEST_F(CacheTest, DamagedIndexIsRebuiltNotFollowed) {
  absl::StatusOr<CocoSourceKey> key = ReadSourceKey((fs::path(dir_) / "instances.json").string());
  ASSERT_TRUE(key.ok());
  absl::StatusOr<CocoIndex> index = CocoIndex::MapCache(cache_path_, *key);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_FALSE(index->annotations().empty());
  // The first annotation's mask range is made to point far outside the stored runs and
  // polygons. Sections lie in the file as in the mapping, so the annotations are `base`
  // bytes after the categories.
  const uint64_t base =
      static_cast<uint64_t>(reinterpret_cast<const char*>(index->annotations().data()) -
                            reinterpret_cast<const char*>(index->categories().data()));
  // The categories section starts right after the header; find it from the file.
  std::ifstream file(cache_path_, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::string categories(reinterpret_cast<const char*>(index->categories().data()),
                               sizeof(CocoCategoryRecord));
  const size_t categories_at = bytes.find(categories);
  ASSERT_NE(categories_at, std::string::npos);
  const uint64_t far = uint64_t{1} << 40;
  Patch(categories_at + base + offsetof(CocoAnnotationRecord, mask_end), &far, sizeof(far));
  // As a writer's bug would leave it: wrong contents under a valid checksum. The bounds
  // checks, not the checksum, must catch it.
  Resign();
  EXPECT_THAT(Report(), AllOf(HasSubstr("rebuilt: corrupt: "), HasSubstr(" range ["),
                              Not(HasSubstr("checksum"))));
  EXPECT_THAT(Report(), StartsWith("mapped "));
}

TEST_F(CacheTest, UnusableCacheDirectoryFallsBackToMemory) {
  // Tests run as root, for whom access() grants every write; a cache directory below a
  // regular file cannot be created by anyone.
  std::ofstream(fs::path(dir_) / "a_file") << "x";
  options_.set_cache_dir((fs::path(dir_) / "a_file" / "cache").string());
  std::unique_ptr<CocoDataset> dataset = Open(options_);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->index_report(),
              AllOf(StartsWith("parsed into memory (no writable cache directory: "),
                    HasSubstr("a_file/cache is not a directory and cannot be created")));
  EXPECT_EQ(dataset->class_names().size(), 4u);
}

TEST_F(CacheTest, CacheLayoutIsAsTheTestsAssume) {
  ASSERT_EQ(kCocoIndexFormatVersion, 4u) << "update the layout constants of CacheTest";
  const std::string bytes = CacheBytes();
  ASSERT_GE(bytes.size(), kHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), "VCOCOIDX");
  EXPECT_EQ(HeaderWord(bytes, 24), bytes.size());          // file_size
  EXPECT_EQ(HeaderWord(bytes, kOffsetsAt), kHeaderBytes);  // the first section follows
  uint64_t end = kHeaderBytes;
  for (int s = 0; s < kNumSections; ++s) {
    EXPECT_EQ(HeaderWord(bytes, kOffsetsAt + 8 * s), end) << "section " << s;
    EXPECT_GT(HeaderWord(bytes, kBytesAt + 8 * s), 0u) << "section " << s << " is empty";
    end = (HeaderWord(bytes, kOffsetsAt + 8 * s) + HeaderWord(bytes, kBytesAt + 8 * s) + 7) / 8 * 8;
  }
  EXPECT_EQ(end, bytes.size());
  std::string zeroed = bytes;
  std::memset(&zeroed[kChecksumAt], 0, 8);
  EXPECT_EQ(HeaderWord(bytes, kChecksumAt), CocoCacheChecksum(zeroed.data(), zeroed.size()));
  EXPECT_EQ(HeaderWord(bytes, kChecksumAt), CocoCacheChecksum(bytes.data(), bytes.size()));
}

// One bit flipped in every field of the header, at the start, middle and end of every
// section, and in the last byte: never used, always rebuilt to the very same bytes, which
// read as the reference reads the JSON.
TEST_F(CacheTest, AFlippedBitAnywhereIsDetectedAndRebuiltToTheSameBytes) {
  const std::string original = CacheBytes();
  absl::StatusOr<ReferenceCoco> reference = ReadCocoReference(options_);
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<std::pair<uint64_t, std::string>> places;
  for (uint64_t at = 0; at < kHeaderBytes; at += 4) places.push_back({at, "header"});
  for (int s = 0; s < kNumSections; ++s) {
    const uint64_t begin = HeaderWord(original, kOffsetsAt + 8 * s);
    const uint64_t bytes = HeaderWord(original, kBytesAt + 8 * s);
    for (uint64_t at : {begin, begin + bytes / 2, begin + bytes - 1}) {
      places.push_back({at, absl::StrCat("section ", s)});
    }
  }
  places.push_back({original.size() - 1, "last byte"});
  for (const auto& [at, what] : places) {
    SCOPED_TRACE(absl::StrCat(what, ", byte ", at));
    char byte = static_cast<char>(original[at] ^ (1 << (at % 8)));
    Patch(at, &byte, 1);
    ::testing::internal::CaptureStderr();
    std::unique_ptr<CocoDataset> dataset = Open(options_);
    const std::string notice = ::testing::internal::GetCapturedStderr();
    ASSERT_NE(dataset, nullptr);
    EXPECT_THAT(dataset->index_report(), StartsWith("built " + cache_path_ + " (rebuilt: "));
    if (at >= 8 && at < 12) {
      EXPECT_THAT(dataset->index_report(), HasSubstr("written by format version"));
    } else if (at < 8) {
      EXPECT_THAT(dataset->index_report(), HasSubstr("wrong magic bytes"));
    } else if (at >= 24 && at < 32) {
      EXPECT_THAT(dataset->index_report(), HasSubstr("truncated or overwritten"));
    } else {
      EXPECT_THAT(dataset->index_report(), HasSubstr("corrupt: its checksum is "));
      // One line, naming the cache, what is wrong with it and what is done about it.
      EXPECT_EQ(std::count(notice.begin(), notice.end(), '\n'), 1) << notice;
      EXPECT_THAT(notice, AllOf(StartsWith("COCO: the index cache " + cache_path_ +
                                           " is damaged (corrupt: its checksum is "),
                                HasSubstr("rebuilding it from " + options_.root())));
    }
    EXPECT_EQ(CacheBytes(), original);
    ExpectSameAsReference(*dataset, *reference);
    ASSERT_THAT(Report(), StartsWith("mapped " + cache_path_));
  }
}

TEST_F(CacheTest, ShortOrZeroFilledCachesAreRebuilt) {
  const std::string original = CacheBytes();
  // 8 bytes short: the size no longer matches the header's.
  fs::resize_file(cache_path_, original.size() - 8);
  EXPECT_THAT(Report(), HasSubstr("rebuilt: truncated or overwritten: "));
  EXPECT_EQ(CacheBytes(), original);
  // A copy cut short and padded back to its size with zeros (as a crash leaves a file whose
  // size was set first): the sizes agree, the checksum does not.
  const std::string zeros(original.size() / 3, '\0');
  Patch(original.size() - zeros.size(), zeros.data(), zeros.size());
  EXPECT_THAT(Report(), HasSubstr("rebuilt: corrupt: its checksum is "));
  EXPECT_EQ(CacheBytes(), original);
  // 64 bytes of the file written over by 64 others of it (a misplaced block).
  Patch(original.size() - 64, original.data() + kHeaderBytes, 64);
  EXPECT_THAT(Report(), HasSubstr("rebuilt: corrupt: its checksum is "));
  EXPECT_EQ(CacheBytes(), original);
  EXPECT_THAT(Report(), StartsWith("mapped "));
}

// Whether a read-only bind mount can be made: needs root (CAP_SYS_ADMIN).
bool MountsAllowed() { return ::geteuid() == 0; }

// Runs `body` in a child process in a private mount namespace where `dir` is a read-only
// bind mount of itself, so that even root cannot write there; the child's exit status is
// body's (0 for success) or 100 + errno when the mount could not be made, with why in `why`.
int RunWithReadOnly(const std::string& dir, const std::string& why,
                    const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    auto fail = [&why](const std::string& what) {
      const int error = errno;
      std::ofstream(why) << what << ": " << std::strerror(error);
      ::_exit(100 + error);
    };
    if (::unshare(CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWNS)");
    // Nothing done here may reach the test's own mount namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      fail("mount(/, MS_REC | MS_PRIVATE)");
    }
    if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      fail("bind mount of " + dir);
    }
    if (::mount(nullptr, dir.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
      fail("read-only remount of " + dir);
    }
    // The point of the mount: root cannot create a file there.
    const std::string probe = (fs::path(dir) / "probe").string();
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd >= 0 || errno != EROFS) {
      errno = fd >= 0 ? 0 : errno;
      fail("creating " + probe + " on the read-only mount did not fail with EROFS");
    }
    ::_exit(body());
  }
  int wstatus = 0;
  if (child < 0 || ::waitpid(child, &wstatus, 0) != child) return -1;
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

// Opens `options` in the child, writing the report (or error) and what went to stderr.
int OpenAndRecord(const CocoOptions& options, const std::string& out) {
  const int saved = ::dup(2);
  const int err = ::open((out + ".stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(err, 2);
  absl::StatusOr<std::unique_ptr<CocoDataset>> dataset = CocoDataset::Create(options);
  ::dup2(saved, 2);
  std::ofstream(out) << (dataset.ok() ? (*dataset)->index_report()
                                      : std::string(dataset.status().message()))
                     << "\n"
                     << (dataset.ok() ? (*dataset)->Size() : -1);
  return dataset.ok() ? 0 : 1;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The cache directory (and the annotation file's) on a read-only file system, as root: a
// valid cache there is mapped; a damaged one cannot be replaced, so the index is parsed into
// memory with a notice naming the directory and how to set another; with no cache_dir the
// default cache directory takes over.
TEST_F(CacheTest, ReadOnlyFileSystemFallsBack) {
  if (!MountsAllowed()) {
    GTEST_SKIP() << "not root: cannot make a read-only bind mount (the tests run as root "
                    "here and in CI, where this test must run)";
  }
  const std::string out = TempDir("read_only_out");
  const std::string xdg = TempDir("read_only_xdg");
  // A second cache directory holding a damaged copy of the cache (same name: it is made from
  // the annotation file's path).
  const fs::path bad_dir = fs::path(dir_) / "cache_bad";
  fs::create_directories(bad_dir);
  const fs::path bad_cache = bad_dir / fs::path(cache_path_).filename();
  fs::copy_file(cache_path_, bad_cache);
  {
    std::fstream file(bad_cache, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(fs::file_size(bad_cache) - 1));
    file.put('\x55');
  }
  CocoOptions bad = options_;
  bad.set_cache_dir(bad_dir.string());
  CocoOptions beside = options_;
  beside.clear_cache_dir();
  const std::string why = (fs::path(out) / "why").string();
  const int status = RunWithReadOnly(dir_, why, [&]() {
    ::setenv("XDG_CACHE_HOME", xdg.c_str(), 1);
    int failed = OpenAndRecord(options_, out + "/valid");
    failed |= OpenAndRecord(bad, out + "/bad") << 1;
    failed |= OpenAndRecord(beside, out + "/beside") << 2;
    return failed;
  });
  if (status == 100 + EPERM) {
    // Root without CAP_SYS_ADMIN (some containers): the environment cannot make the mount.
    GTEST_SKIP() << "could not make " << dir_ << " a read-only mount: " << ReadText(why)
                 << " (root without CAP_SYS_ADMIN)";
  }
  ASSERT_LT(status, 100) << "could not make " << dir_
                         << " a read-only mount as root: " << ReadText(why)
                         << " (the test needs CAP_SYS_ADMIN)";
  ASSERT_EQ(status, 0) << ReadText(out + "/valid") << "\n"
                       << ReadText(out + "/bad") << "\n"
                       << ReadText(out + "/beside");

  // A valid cache on a read-only file system is used as it is.
  EXPECT_EQ(ReadText(out + "/valid"), "mapped " + cache_path_ + "\n4");
  EXPECT_EQ(ReadText(out + "/valid.stderr"), "");

  // A damaged one is not, and cannot be replaced there: parsed into memory, with a notice
  // saying what (no writable cache directory), where (the directory, the damaged cache) and
  // how to fix it (cache_dir).
  const std::string bad_dir_says =
      absl::StrCat(bad_dir.string(), " is not writable (Read-only file system), and its cache ",
                   bad_cache.string(), " cannot be used (corrupt: its checksum is ");
  EXPECT_THAT(ReadText(out + "/bad"),
              AllOf(StartsWith("parsed into memory (no writable cache directory: " + bad_dir_says),
                    HasSubstr("\n4")));
  const std::string notice = ReadText(out + "/bad.stderr");
  EXPECT_EQ(std::count(notice.begin(), notice.end(), '\n'), 1) << notice;
  EXPECT_THAT(notice, AllOf(StartsWith("COCO: " + options_.root() +
                                       "/instances.json: "
                                       "no writable cache directory: " +
                                       bad_dir_says),
                            HasSubstr("parsing it into memory on every load instead. To cache "
                                      "it, set CocoOptions.cache_dir to a writable directory")));
  EXPECT_EQ(fs::file_size(bad_cache), fs::file_size(cache_path_));  // left as it was

  // Without cache_dir, the annotation file's directory is read-only: the default cache
  // directory is used, and the report says why.
  const std::string built_default = absl::StrCat(
      "built ", CocoCachePath(options_.root() + "/instances.json", xdg + "/vision-train/coco"),
      " (first load); instead of ", dir_, " is not writable (Read-only file system)");
  EXPECT_EQ(ReadText(out + "/beside"), built_default + "\n4");
}

// Two annotation files of the same name in one cache_dir get a cache each; a cache copied
// over another file's is stale there (its key is the other file's), so it is rebuilt.
TEST_F(CacheTest, CachesOfOtherFilesWithTheSameNameAreNeverUsed) {
  const std::string other_dir = TempDir("other_instances");
  std::string text = ReadText((fs::path(dir_) / "instances.json").string());
  const size_t at = text.find("\"rectangle\"");
  ASSERT_NE(at, std::string::npos);
  text[at + 1] = 'R';
  std::ofstream(fs::path(other_dir) / "instances.json") << text;
  CocoOptions other = options_;
  other.set_root(other_dir);
  const std::string other_cache =
      CocoCachePath((fs::path(other_dir) / "instances.json").string(), options_.cache_dir());
  ASSERT_NE(other_cache, cache_path_);
  std::unique_ptr<CocoDataset> dataset = Open(other);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->index_report(), StartsWith("built " + other_cache + " (first load)"));
  EXPECT_EQ(dataset->class_names()[1], "Rectangle");
  dataset = Open(options_);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->index_report(), "mapped " + cache_path_);
  EXPECT_EQ(dataset->class_names()[1], "rectangle");

  fs::copy_file(other_cache, cache_path_, fs::copy_options::overwrite_existing);
  dataset = Open(options_);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->index_report(), HasSubstr("(rebuilt: stale: built from a source of "));
  EXPECT_EQ(dataset->class_names()[1], "rectangle");
}

TEST_F(CacheTest, WaitingForALockHolderTimesOutNamingTheCache) {
  fs::remove(cache_path_);
  const std::string lock_path = cache_path_ + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  // flock() locks belong to the open file description: a second open() in this process
  // conflicts like another process would.
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  options_.set_cache_wait_seconds(0.2);
  absl::Status status = CocoDataset::Create(options_).status();
  ::close(fd);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(
      status.message(),
      AllOf(HasSubstr("waited 0.2 s for another process to build the index cache " + cache_path_),
            HasSubstr(lock_path), HasSubstr("cache_wait_seconds")));
}

// Two processes started together: one builds the cache, the other waits and maps it.
TEST_F(GeneratedSetTest, TwoProcessesBuildTheCacheOnce) {
  const std::string cache_dir = TempDir("two_ranks_cache");
  const std::string out = TempDir("two_ranks_out");
  CocoOptions options = Cached(Options(*root_, "instances.json"), cache_dir);
  options.set_empty_images(CocoOptions::KEEP);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t children[2];
  for (int rank = 0; rank < 2; ++rank) {
    children[rank] = ::fork();
    ASSERT_GE(children[rank], 0);
    if (children[rank] == 0) {
      ::close(go[1]);
      char byte;
      if (::read(go[0], &byte, 1) != 0) ::_exit(3);  // wait until the parent closes the pipe
      absl::StatusOr<std::unique_ptr<CocoDataset>> dataset = CocoDataset::Create(options);
      std::ofstream(fs::path(out) / absl::StrCat("rank", rank))
          << (dataset.ok() ? (*dataset)->index_report() : std::string(dataset.status().message()))
          << "\n"
          << (dataset.ok() ? (*dataset)->Size() : -1);
      ::_exit(dataset.ok() ? 0 : 1);
    }
  }
  ::close(go[0]);
  ::close(go[1]);  // both children start now
  int built = 0;
  int mapped = 0;
  for (int rank = 0; rank < 2; ++rank) {
    int wstatus = 0;
    ASSERT_EQ(::waitpid(children[rank], &wstatus, 0), children[rank]);
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    std::ifstream in(fs::path(out) / absl::StrCat("rank", rank));
    std::string report;
    int64_t size = 0;
    std::getline(in, report);
    in >> size;
    EXPECT_EQ(size, 1500) << report;
    built += report.rfind("built ", 0) == 0;
    mapped += report.rfind("mapped ", 0) == 0;
  }
  EXPECT_EQ(built, 1);
  EXPECT_EQ(mapped, 1);
  // Nothing but the cache and its lock file is left (no temporary file).
  int files = 0;
  for (const auto& entry : fs::directory_iterator(cache_dir)) {
    ++files;
    EXPECT_THAT(entry.path().string(), ::testing::AnyOf(::testing::EndsWith(".index"),
                                                        ::testing::EndsWith(".index.lock")));
  }
  EXPECT_EQ(files, 2);
}

}  // namespace
}  // namespace vision::data::datasets::coco
