#include "models/backbones/torchvision_import.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/utils.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/backbones/resnet.h"
#include "models/backbones/torch_save_writer_for_test.h"
#include "models/ops/deform_conv.h"

namespace vision::models::backbones {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Written by testdata/make_goldens.py with Python's torch.save.
constexpr char kStemGolden[] = "models/backbones/testdata/resnet18_stem.pth";
constexpr char kViewsGolden[] = "models/backbones/testdata/views_dict.pth";

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::unique_ptr<ResNet> MakeResNet18(bool frozen_batchnorm = false) {
  absl::StatusOr<std::unique_ptr<ResNet>> net =
      MakeResNet(ResNetConfig(18).frozen_batchnorm(frozen_batchnorm));
  EXPECT_TRUE(net.ok()) << net.status();
  return net.ok() ? *std::move(net) : nullptr;
}

// The module's state with the norms randomised too: convolutions already differ between
// two modules (random Kaiming init), norms would start equal. Values stay moderate so the
// network's outputs can be compared.
StateDict RandomState(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  StateDict state;
  for (const auto& item : module.named_parameters()) {
    if (item.value().dim() == 1) item.value().uniform_(0.5, 1.5);
    state.emplace_back(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers()) {
    if (item.value().is_floating_point()) {
      item.value().uniform_(0.5, 1.5);
    } else {
      item.value().fill_(17);
    }
    state.emplace_back(item.key(), item.value());
  }
  return state;
}

void ExpectModuleHolds(torch::nn::Module& module, const StateDict& state) {
  auto params = module.named_parameters();
  auto buffers = module.named_buffers();
  for (const auto& [key, tensor] : state) {
    const at::Tensor* target = params.find(key);
    if (target == nullptr) target = buffers.find(key);
    ASSERT_NE(target, nullptr) << key;
    EXPECT_TRUE(at::equal(*target, tensor)) << key;
  }
}

// (pickle, records) written as a torch.save archive.
void WriteArchive(const std::string& path, const std::string& pickle,
                  const std::vector<std::pair<std::string, std::string>>& records = {}) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
}

// A string literal that may contain NUL bytes.
template <size_t N>
std::string Bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

at::Tensor Ramp(at::IntArrayRef shape, double scale) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (at::arange(n, at::kDouble) * scale).to(at::kFloat).reshape(shape);
}

TEST(TorchvisionImportTest, OrderedDictRoundTripIntoResNet18IsExact) {
  std::unique_ptr<ResNet> source = MakeResNet18();
  ASSERT_NE(source, nullptr);
  const StateDict state = RandomState(*source);
  ASSERT_EQ(state.size(), 120u);
  const std::string path = TempPath("ordered.pth");
  testing::WriteTorchSave(path, state, testing::DictKind::kOrderedDict);

  absl::StatusOr<StateDict> read = ReadTorchStateDict(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) EXPECT_EQ((*read)[i].first, state[i].first);

  std::unique_ptr<ResNet> target = MakeResNet18();
  ASSERT_NE(target, nullptr);
  absl::StatusOr<ImportReport> report = ImportTorchvisionWeights(path, *target, /*strict=*/true);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->loaded.size(), 120u);
  EXPECT_TRUE(report->complete()) << report->ToString();
  EXPECT_THAT(report->ignored, IsEmpty());
  ExpectModuleHolds(*target, state);
  // Loading must not make frozen-by-default tensors trainable or vice versa.
  EXPECT_TRUE(target->named_parameters()["conv1.weight"].requires_grad());
}

TEST(TorchvisionImportTest, PlainDictIntoFrozenBatchNormGivesTheSameFunction) {
  std::unique_ptr<ResNet> source = MakeResNet18();
  ASSERT_NE(source, nullptr);
  const StateDict state = RandomState(*source);
  const std::string path = TempPath("plain.pth");
  testing::WriteTorchSave(path, state, testing::DictKind::kDict);

  std::unique_ptr<ResNet> frozen = MakeResNet18(/*frozen_batchnorm=*/true);
  ASSERT_NE(frozen, nullptr);
  absl::StatusOr<ImportReport> report = ImportTorchvisionWeights(path, *frozen, /*strict=*/true);
  ASSERT_TRUE(report.ok()) << report.status();
  // FrozenBatchNorm2d has no num_batches_tracked: the 20 in the file are ignored, not
  // unexpected, so strict loading succeeds.
  EXPECT_EQ(report->loaded.size(), 100u);
  EXPECT_EQ(report->ignored.size(), 20u);
  EXPECT_EQ(report->ignored.front(), "bn1.num_batches_tracked");

  torch::NoGradGuard no_grad;
  source->eval();
  const at::Tensor images = at::randn({1, 3, 32, 32});
  const std::vector<at::Tensor> expected = source->Forward(images);
  const std::vector<at::Tensor> actual = frozen->Forward(images);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(at::allclose(actual[i], expected[i], 1e-4, 1e-4)) << "output " << i;
  }
}

TEST(TorchvisionImportTest, ReadsPythonTorchSaveOfAnOrderedDictWithMetadata) {
  absl::StatusOr<StateDict> state = ReadTorchStateDict(kStemGolden);
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<std::string> keys;
  for (const auto& item : *state) keys.push_back(item.first);
  EXPECT_THAT(keys, ElementsAre("conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                "bn1.running_var", "bn1.num_batches_tracked",
                                "layer1.0.conv1.weight", "fc.bias"));
  EXPECT_TRUE(at::equal((*state)[0].second, Ramp({64, 3, 7, 7}, 0.25)));
  EXPECT_TRUE(at::equal((*state)[1].second, Ramp({64}, 0.5) + 1));
  EXPECT_TRUE(at::equal((*state)[2].second, Ramp({64}, -0.125)));
  EXPECT_EQ((*state)[5].second.scalar_type(), at::kLong);
  EXPECT_EQ((*state)[5].second.dim(), 0);
  EXPECT_EQ((*state)[5].second.item<int64_t>(), 1234);
  EXPECT_TRUE(at::equal((*state)[7].second, Ramp({1000}, 0.25)));
}

TEST(TorchvisionImportTest, ReportsMissingUnexpectedAndMismatchedKeys) {
  std::unique_ptr<ResNet> net = MakeResNet18();
  ASSERT_NE(net, nullptr);
  absl::StatusOr<ImportReport> report = ImportTorchvisionWeights(kStemGolden, *net, false);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->loaded,
              ElementsAre("conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                          "bn1.running_var", "bn1.num_batches_tracked"));
  EXPECT_THAT(report->unexpected, ElementsAre("fc.bias"));
  EXPECT_THAT(report->mismatched,
              ElementsAre("layer1.0.conv1.weight: file [2, 2, 1, 1], module [64, 64, 3, 3]"));
  // resnet18 has 120 keys without fc: 7 are in the file and the other 19
  // num_batches_tracked are ignored rather than missing.
  EXPECT_EQ(report->missing.size(), 94u);
  EXPECT_EQ(report->ignored.size(), 19u);
  EXPECT_THAT(report->missing, ::testing::Contains("layer4.1.bn2.running_var"));
  EXPECT_THAT(report->missing, ::testing::Not(::testing::Contains("layer1.0.conv1.weight")));
  EXPECT_FALSE(report->complete());
  EXPECT_TRUE(at::equal(net->named_parameters()["conv1.weight"], Ramp({64, 3, 7, 7}, 0.25)));
  EXPECT_EQ(net->named_buffers()["bn1.num_batches_tracked"].item<int64_t>(), 1234);
  EXPECT_THAT(report->ToString(), HasSubstr("unexpected in the file: fc.bias"));
}

// A plain torchvision checkpoint fills a ResNet whose layer2..4 conv2 are deformable: the
// convolution weights keep their keys, and the offset branches, which the file cannot have,
// are reported as added rather than missing when the caller names them.
TEST(TorchvisionImportTest, PlainCheckpointIntoDeformableStagesReportsOffsetBranchesAsAdded) {
  std::unique_ptr<ResNet> source = MakeResNet18();
  ASSERT_NE(source, nullptr);
  const StateDict state = RandomState(*source);
  const std::string path = TempPath("plain_for_dcn.pth");
  testing::WriteTorchSave(path, state);
  absl::StatusOr<StateDict> read = ReadTorchStateDict(path);
  ASSERT_TRUE(read.ok()) << read.status();

  absl::StatusOr<std::unique_ptr<ResNet>> made =
      MakeResNet(ResNetConfig(18).stage_with_dcn({false, true, true, true}));
  ASSERT_TRUE(made.ok()) << made.status();
  ResNet& net = **made;
  const std::vector<std::string> offsets = ops::OffsetBranchParameterNames(net);
  // Two blocks in each of three stages.
  ASSERT_EQ(offsets.size(), 12u);
  EXPECT_EQ(offsets[0], "layer2.0.conv2.conv_offset.weight");

  // Without naming them they are missing, and strict loading refuses.
  absl::StatusOr<ImportReport> refused = LoadStateDict(*read, net, /*strict=*/true, path);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("layer2.0.conv2.conv_offset.weight"));

  absl::StatusOr<ImportReport> report = LoadStateDict(*read, net, /*strict=*/true, path, offsets);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->complete());
  EXPECT_THAT(report->missing, IsEmpty());
  EXPECT_THAT(report->added, ::testing::UnorderedElementsAreArray(offsets));
  EXPECT_EQ(report->loaded.size(), state.size());
  EXPECT_THAT(report->ToString(), HasSubstr("12 new in the module"));
  ExpectModuleHolds(net, state);
  EXPECT_TRUE(at::equal(net.named_parameters()["layer4.1.conv2.weight"],
                        source->named_parameters()["layer4.1.conv2.weight"]));
  for (const std::string& key : offsets) {
    EXPECT_TRUE(net.named_parameters()[key].eq(0).all().item<bool>()) << key;
  }
}

TEST(TorchvisionImportTest, StrictFailureLeavesTheModuleUnchanged) {
  std::unique_ptr<ResNet> net = MakeResNet18();
  ASSERT_NE(net, nullptr);
  const at::Tensor before = net->named_parameters()["conv1.weight"].clone();
  absl::StatusOr<ImportReport> report = ImportTorchvisionWeights(kStemGolden, *net, true);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(report.status().message(), HasSubstr(kStemGolden));
  EXPECT_THAT(report.status().message(), HasSubstr("fc.bias"));
  EXPECT_THAT(report.status().message(), HasSubstr("layer1.0.conv1.weight: file [2, 2, 1, 1]"));
  EXPECT_TRUE(at::equal(net->named_parameters()["conv1.weight"], before));
}

TEST(TorchvisionImportTest, ReadsViewsSharingAStorageAndOtherDtypes) {
  absl::StatusOr<StateDict> state = ReadTorchStateDict(kViewsGolden);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->size(), 6u);
  const at::Tensor base = Ramp({2, 3}, 0.25);
  EXPECT_EQ((*state)[0].first, "base");
  EXPECT_TRUE(at::equal((*state)[0].second, base));
  EXPECT_EQ((*state)[1].first, "transposed");
  EXPECT_TRUE(at::equal((*state)[1].second, base.t()));
  EXPECT_EQ((*state)[2].first, "row1");
  EXPECT_TRUE(at::equal((*state)[2].second, base[1]));
  EXPECT_EQ((*state)[3].first, "long");
  EXPECT_TRUE(
      at::equal((*state)[3].second, at::tensor(std::vector<int64_t>{-5, 0, int64_t{1} << 40})));
  EXPECT_EQ((*state)[4].first, "half");
  EXPECT_EQ((*state)[4].second.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::equal((*state)[4].second.to(at::kFloat), at::tensor({0.5f, -2.0f})));
  EXPECT_EQ((*state)[5].first, "scalar");
  EXPECT_EQ((*state)[5].second.item<int64_t>(), 7);
}

TEST(TorchvisionImportTest, MissingFileIsNotFound) {
  const std::string path = TempPath("does_not_exist.pth");
  absl::StatusOr<StateDict> state = ReadTorchStateDict(path);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(state.status().message(), HasSubstr(path));
}

TEST(TorchvisionImportTest, CorruptFilesNameTheFile) {
  const std::string garbage = TempPath("garbage.pth");
  WriteBytes(garbage, "this is not a zip archive at all");
  absl::StatusOr<StateDict> state = ReadTorchStateDict(garbage);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(state.status().message(), HasSubstr(garbage));
  EXPECT_THAT(state.status().message(), HasSubstr("not a readable torch.save zip archive"));

  const std::string truncated = TempPath("truncated.pth");
  const std::string golden = ReadBytes(kStemGolden);
  ASSERT_GT(golden.size(), 1000u);
  WriteBytes(truncated, golden.substr(0, golden.size() / 2));
  state = ReadTorchStateDict(truncated);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(state.status().message(), HasSubstr(truncated));

  const std::string legacy = TempPath("legacy.pth");
  WriteBytes(legacy, Bytes("\x80\x02\x8a\x0a"));
  state = ReadTorchStateDict(legacy);
  EXPECT_THAT(state.status().message(), HasSubstr("legacy torch.save format"));
}

TEST(TorchvisionImportTest, MalformedContentsNameTheKey) {
  const std::vector<std::pair<std::string, at::Tensor>> one = {{"conv1.weight", at::ones({4})}};

  // The storage record is shorter than the tensor it claims to hold.
  const std::string short_record = TempPath("short_record.pth");
  WriteArchive(short_record, testing::PickleStateDict(one, testing::DictKind::kOrderedDict),
               {{"data/0", std::string(8, '\0')}});
  absl::StatusOr<StateDict> state = ReadTorchStateDict(short_record);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(state.status().message(), HasSubstr(short_record));
  EXPECT_THAT(state.status().message(), HasSubstr("key 'conv1.weight'"));
  EXPECT_THAT(state.status().message(), HasSubstr("has 8 bytes, expected 16"));

  const std::string no_record = TempPath("no_record.pth");
  WriteArchive(no_record, testing::PickleStateDict(one, testing::DictKind::kDict));
  state = ReadTorchStateDict(no_record);
  EXPECT_THAT(state.status().message(), HasSubstr("key 'conv1.weight'"));
  EXPECT_THAT(state.status().message(), HasSubstr("missing from the archive"));

  // {'epoch': 3}: a training checkpoint rather than a state dict.
  const std::string checkpoint = TempPath("checkpoint.pth");
  WriteArchive(checkpoint, Bytes("\x80\x02}(X\x05\x00\x00\x00"
                                 "epochK\x03u."));
  state = ReadTorchStateDict(checkpoint);
  EXPECT_THAT(state.status().message(), HasSubstr("key 'epoch' holds a int, not a tensor"));

  // An arbitrary Python object.
  const std::string object = TempPath("object.pth");
  WriteArchive(object, Bytes("\x80\x02"
                             "c__main__\nNet\n)R."));
  state = ReadTorchStateDict(object);
  EXPECT_THAT(state.status().message(), HasSubstr("'__main__.Net'"));
  EXPECT_THAT(state.status().message(), HasSubstr(object));

  // A truncated pickle.
  const std::string cut = TempPath("cut_pickle.pth");
  const std::string pickle = testing::PickleStateDict(one, testing::DictKind::kOrderedDict);
  WriteArchive(cut, pickle.substr(0, pickle.size() / 2), {{"data/0", std::string(16, '\0')}});
  state = ReadTorchStateDict(cut);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(state.status().message(), HasSubstr("data.pkl"));
}

// {'w': a float tensor on the 4-element storage data/0} whose offset, size and stride are the
// given pickle opcodes, as a crafted file may state them.
std::string OneViewPickle(const std::string& offset_size_stride) {
  return Bytes(
             "\x80\x02}(X\x01\x00\x00\x00w"
             "ctorch._utils\n_rebuild_tensor_v2\n"
             "((X\x07\x00\x00\x00storage"
             "ctorch\nFloatStorage\n"
             "X\x01\x00\x00\x00"
             "0"
             "X\x03\x00\x00\x00"
             "cpuK\x04tQ") +
         offset_size_stride +
         Bytes(
             "\x89"
             "ccollections\nOrderedDict\n)RtRu.");
}

// LibTorch's own torch::pickle_load accepts such views and reads past the storage (see the
// header); the importer must refuse them.
TEST(TorchvisionImportTest, ViewsOutsideTheirStorageNameTheKey) {
  const at::Tensor storage = at::arange(4, at::kFloat);
  const std::vector<std::pair<std::string, std::string>> records = {
      {"data/0", std::string(static_cast<const char*>(storage.data_ptr()), 16)}};
  const auto read = [&](const std::string& name, const std::string& view) {
    const std::string path = TempPath(name);
    WriteArchive(path, OneViewPickle(view), records);
    return ReadTorchStateDict(path);
  };

  // offset 1, size (2,), stride (1,): inside, so the file itself is well formed.
  absl::StatusOr<StateDict> state = read("inside.pth", Bytes("K\x01K\x02\x85K\x01\x85"));
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->size(), 1u);
  EXPECT_TRUE(at::equal(state->front().second, at::arange(1, 3, at::kFloat)));

  // size (100,)
  state = read("long.pth", Bytes("K\x00K\x64\x85K\x01\x85"));
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(state.status().message(), HasSubstr("long.pth': key 'w'"));
  EXPECT_THAT(state.status().message(), HasSubstr("reaches element 99 of a storage of 4"));

  // offset 3, size (2,)
  state = read("offset.pth", Bytes("K\x03K\x02\x85K\x01\x85"));
  EXPECT_THAT(state.status().message(), HasSubstr("reaches element 4 of a storage of 4"));

  // size (2^40,), in the 6-byte LONG1 that Python's pickler writes for it.
  state = read("huge.pth", Bytes("K\x00\x8a\x06\x00\x00\x00\x00\x00\x01\x85K\x01\x85"));
  EXPECT_THAT(state.status().message(),
              HasSubstr("reaches element 1099511627775 of a storage of 4"));

  // stride (-1,)
  state = read("negative.pth", Bytes("K\x03K\x02\x85J\xff\xff\xff\xff\x85"));
  EXPECT_THAT(state.status().message(), HasSubstr("negative.pth': key 'w'"));
  EXPECT_THAT(state.status().message(), HasSubstr("negative tensor size or stride"));

  // size (0, -18): an empty dimension before a negative one (a fuzz finding: at::empty threw).
  state = read("empty_then_negative.pth", Bytes("K\x00K\x00J\xee\xff\xff\xff\x86K\x01K\x01\x86"));
  EXPECT_THAT(state.status().message(), HasSubstr("negative tensor size or stride"));
}

}  // namespace
}  // namespace vision::models::backbones
