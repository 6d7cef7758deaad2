// Linked with no plugin at all, so every options type and registered name of the table is
// missing here, as it is in a training target that lacks it.
#include "tools/plugin_targets.h"

#include "core/registry.h"
#include "core/status_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kTarget[] = "//models/mynet:train_quickstart";

TEST(MissingPluginHintsTest, UnlinkedOptionsTypeNamesItsPluginAndTarget) {
  const std::string config = R"pb(
    model {
      type: "DBNet"
      options {
        [type.googleapis.com/vision.models.dbnet.DBNetOptions] { k: 50 }
      }
    }
    optimizer {
      options {
        [type.googleapis.com/vision.models.dbnet.DBNetOptions] {}
      }
    }
  )pb";
  // Named once, although the config names it twice.
  EXPECT_THAT(MissingPluginHints(config, absl::OkStatus(), kTarget),
              ElementsAre("options type vision.models.dbnet.DBNetOptions: the model 'DBNet' is "
                          "not linked into //models/mynet:train_quickstart: add "
                          "\"//models/dbnet\" to its deps"));
}

TEST(MissingPluginHintsTest, LinkedOptionsTypesAreNotReported) {
  // google.protobuf.Any is in every binary's descriptor pool.
  EXPECT_THAT(MissingPluginHints("x { [type.googleapis.com/google.protobuf.Any] {} }",
                                 absl::OkStatus(), kTarget),
              IsEmpty());
}

TEST(MissingPluginHintsTest, UnknownOptionsTypeSaysNoPluginDeclaresIt) {
  const std::vector<std::string> hints = MissingPluginHints(
      "[type.googleapis.com/vision.NoSuchOptions] {}", absl::OkStatus(), kTarget);
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_THAT(hints[0],
              HasSubstr("vision.NoSuchOptions is not linked into " + std::string(kTarget)));
  EXPECT_THAT(hints[0], HasSubstr("no plugin of //tools:all_plugins declares it"));
}

// The registry's miss, with context added on the way up, names the family and the target; the
// same name in another family (COCO: a dataset and an evaluator) gets that family's target.
TEST(MissingPluginHintsTest, RegistryMissNamesFamilyAndTarget) {
  const absl::Status dataset_miss = core::WithContext(
      "train_data", core::internal::UnknownName("dataset", "COCO", {"ICDAR2015"}));
  EXPECT_THAT(MissingPluginHints("", dataset_miss, kTarget),
              ElementsAre("dataset 'COCO' is not linked into //models/mynet:train_quickstart: "
                          "add \"//data/datasets/coco\" to its deps"));
  const absl::Status evaluator_miss = core::internal::UnknownName("evaluator", "COCO", {});
  EXPECT_THAT(MissingPluginHints("", evaluator_miss, kTarget),
              ElementsAre(HasSubstr("add \"//evaluation/coco:coco_evaluator\" to its deps")));
}

TEST(MissingPluginHintsTest, RegistryMissOutsideTheTableSaysSo) {
  const absl::Status miss = core::internal::UnknownName("model", "DBNett", {});
  EXPECT_THAT(MissingPluginHints("", miss, kTarget),
              ElementsAre(HasSubstr("no plugin of //tools:all_plugins registers it")));
  // Errors that are not registry misses give no hint.
  EXPECT_THAT(MissingPluginHints("", absl::NotFoundError("Unknown model 'X'"), kTarget), IsEmpty());
}

}  // namespace
}  // namespace vision::tools
