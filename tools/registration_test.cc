// Links every plugin of //tools:all_plugins, checks that each expected name is registered, and
// dry-runs every shipped .pbtxt (passed as arguments): loads it, then builds every component
// through the registries, with dataset roots pointed at the fixtures in testdata/.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/augmentation.h"
#include "core/backbone.h"
#include "core/comm_strategy.h"
#include "core/config/loader.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/lr_schedule.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/pipeline_builder.h"
#include "google/protobuf/message.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::tools {
namespace {

std::vector<std::string>* config_paths = nullptr;

// A fixture for each dataset type, so shipped configs with user paths can be dry-run.
const std::map<std::string, std::string>& DatasetFixtures() {
  static const auto* fixtures = new std::map<std::string, std::string>{
      {"ICDAR2015", "testdata/icdar2015"},
  };
  return *fixtures;
}

// Sets the `root` field of a dataset's options (every dataset options message has one).
void PointAtFixture(core::DataConfig* data) {
  core::PluginSpec* dataset = data->mutable_dataset();
  auto fixture = DatasetFixtures().find(dataset->type());
  ASSERT_NE(fixture, DatasetFixtures().end())
      << "no fixture for dataset '" << dataset->type() << "': add one to DatasetFixtures()";
  const std::string& url = dataset->options().type_url();
  const google::protobuf::Descriptor* type =
      google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
          url.substr(url.rfind('/') + 1));
  ASSERT_NE(type, nullptr) << url;
  std::unique_ptr<google::protobuf::Message> options(
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(type)->New());
  ASSERT_TRUE(dataset->options().UnpackTo(options.get()));
  const google::protobuf::FieldDescriptor* root = type->FindFieldByName("root");
  ASSERT_NE(root, nullptr) << type->full_name() << " has no `root` field";
  options->GetReflection()->SetString(options.get(), root, fixture->second);
  dataset->mutable_options()->PackFrom(*options);
}

TEST(RegistrationTest, EveryPluginIsRegistered) {
  using ::testing::IsSupersetOf;
  EXPECT_THAT(core::ModelRegistry::Get().Names(), IsSupersetOf({"DBNet"}));
  EXPECT_THAT(core::BackboneRegistry::Get().Names(),
              IsSupersetOf({"ResNet18", "ResNet34", "ResNet50", "ResNet101"}));
  EXPECT_THAT(core::DatasetRegistry::Get().Names(), IsSupersetOf({"ICDAR2015"}));
  EXPECT_THAT(core::AugmentationRegistry::Get().Names(),
              IsSupersetOf({"RandomScale", "RandomCrop", "RandomRotate", "HorizontalFlip",
                            "ColorJitter", "Resize", "PadToDivisor", "Normalize"}));
  EXPECT_THAT(core::OptimizerRegistry::Get().Names(), IsSupersetOf({"SGD", "Adam", "AdamW"}));
  EXPECT_THAT(core::LrScheduleRegistry::Get().Names(),
              IsSupersetOf({"Constant", "Poly", "Cosine", "MultiStep"}));
  EXPECT_THAT(core::CommStrategyRegistry::Get().Names(),
              IsSupersetOf({"allreduce", "bucketed", "fp16_compress", "bf16_compress"}));
  EXPECT_THAT(core::EvaluatorRegistry::Get().Names(), IsSupersetOf({"ICDAR2015Hmean"}));
}

TEST(RegistrationTest, EveryShippedConfigDryRuns) {
  ASSERT_NE(config_paths, nullptr);
  ASSERT_FALSE(config_paths->empty()) << "no configs passed to the test";
  for (const std::string& path : *config_paths) {
    SCOPED_TRACE(path);
    absl::StatusOr<core::TrainPipelineConfig> config = core::LoadPipelineConfig(path);
    ASSERT_TRUE(config.ok()) << config.status();
    PointAtFixture(config->mutable_train_data());
    if (config->has_eval_data()) PointAtFixture(config->mutable_eval_data());
    for (int world_size : {1, 2}) {
      absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(*config, world_size);
      ASSERT_TRUE(pipeline.ok()) << pipeline.status();
      EXPECT_GT(pipeline->train_dataset->Size(), 0);
      EXPECT_FALSE(core::DescribePipeline(*config, *pipeline).empty());
    }
  }
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  vision::tools::config_paths = new std::vector<std::string>(argv + 1, argv + argc);
  return RUN_ALL_TESTS();
}
