#include "core/registry.h"

#include <memory>
#include <string>
#include <vector>

#include "core/config/test_options.pb.h"
#include "core/status_util.h"
#include "core/plugin.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

using ::testing::HasSubstr;
using testing::BarOptions;
using testing::FooOptions;

class Widget {
 public:
  static constexpr char kFamily[] = "widget";
  virtual ~Widget() = default;
  virtual int size() const = 0;
};
using WidgetRegistry = PluginRegistry<Widget, int>;

class FooWidget : public Widget {
 public:
  explicit FooWidget(int size) : size_(size) {}
  static absl::StatusOr<std::unique_ptr<FooWidget>> Create(const FooOptions& options, int extra) {
    if (options.size() < 0) return absl::InvalidArgumentError("size: must be >= 0");
    return std::make_unique<FooWidget>(options.size() + extra);
  }
  int size() const override { return size_; }

 private:
  int size_;
};

VISION_REGISTER_PLUGIN(WidgetRegistry, "FooWidget", FooWidget, FooOptions);

google::protobuf::Any Pack(const google::protobuf::Message& message) {
  google::protobuf::Any any;
  any.PackFrom(message);
  return any;
}

TEST(RegistryTest, CreatesWithDefaultOptionsWhenAnyIsEmpty) {
  absl::StatusOr<std::unique_ptr<Widget>> w =
      WidgetRegistry::Get().Create("FooWidget", google::protobuf::Any(), 10);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->size(), 13);
}

TEST(RegistryTest, PassesUnpackedOptionsAndArguments) {
  FooOptions options;
  options.set_size(5);
  absl::StatusOr<std::unique_ptr<Widget>> w =
      WidgetRegistry::Get().Create("FooWidget", Pack(options), 1);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->size(), 6);
}

TEST(RegistryTest, PluginErrorsPassThrough) {
  FooOptions options;
  options.set_size(-1);
  absl::StatusOr<std::unique_ptr<Widget>> w =
      WidgetRegistry::Get().Create("FooWidget", Pack(options), 1);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("size: must be >= 0"));
}

TEST(RegistryTest, WrongOptionsTypeNamesBothTypes) {
  BarOptions wrong;
  absl::StatusOr<std::unique_ptr<Widget>> w =
      WidgetRegistry::Get().Create("FooWidget", Pack(wrong), 0);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("vision.core.testing.FooOptions"));
  EXPECT_THAT(w.status().message(), HasSubstr("vision.core.testing.BarOptions"));
}

TEST(RegistryTest, UnknownNameListsRegisteredAndSuggests) {
  absl::StatusOr<std::unique_ptr<Widget>> w =
      WidgetRegistry::Get().Create("FooWidgte", google::protobuf::Any(), 0);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(w.status().message(), HasSubstr("Unknown widget 'FooWidgte'"));
  EXPECT_THAT(w.status().message(), HasSubstr("did you mean 'FooWidget'?"));
  EXPECT_THAT(w.status().message(), HasSubstr("Registered widget plugins: FooWidget"));
}

// The missed plugin is readable without parsing the message, also after context is added.
TEST(RegistryTest, UnknownNameCarriesFamilyAndNameThroughContext) {
  absl::StatusOr<std::unique_ptr<Widget>> w =
      WidgetRegistry::Get().Create("BarWidget", google::protobuf::Any(), 0);
  const absl::Status wrapped = WithContext("model.backbone", WithContext("a.pbtxt", w.status()));
  EXPECT_THAT(wrapped.message(), HasSubstr("model.backbone: a.pbtxt: Unknown widget"));
  const std::optional<UnknownPlugin> missed = UnknownPluginOf(wrapped);
  ASSERT_TRUE(missed.has_value());
  EXPECT_EQ(missed->family, "widget");
  EXPECT_EQ(missed->name, "BarWidget");
  EXPECT_FALSE(UnknownPluginOf(absl::NotFoundError("Unknown widget 'BarWidget'")).has_value());
}

TEST(RegistryTest, FarMissGivesNoSuggestion) {
  absl::StatusOr<std::unique_ptr<Widget>> w =
      WidgetRegistry::Get().Create("Completely", google::protobuf::Any(), 0);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(w.status().message(), ::testing::Not(HasSubstr("did you mean")));
}

TEST(RegistryTest, NamesAreSortedAndContainsWorks) {
  EXPECT_TRUE(WidgetRegistry::Get().Contains("FooWidget"));
  EXPECT_FALSE(WidgetRegistry::Get().Contains("foowidget"));
  EXPECT_THAT(WidgetRegistry::Get().Names(), ::testing::ElementsAre("FooWidget"));
  EXPECT_EQ(WidgetRegistry::Get().family(), "widget");
}

// The macro records where a plugin comes from: its site, its options type and the label of the
// vision_plugin compiling it (none here: a cc_test is not one), for tools/plugin_table_main.
TEST(RegistryTest, RegistrationsRecordSiteOptionsTypeAndLabel) {
  const std::vector<Registration> registrations = WidgetRegistry::Get().Registrations();
  ASSERT_EQ(registrations.size(), 1u);
  EXPECT_EQ(registrations[0].name, "FooWidget");
  EXPECT_THAT(registrations[0].site, ::testing::MatchesRegex("core/registry_test.cc:[0-9]+"));
  EXPECT_EQ(registrations[0].options_type, FooOptions::descriptor()->full_name());
  EXPECT_EQ(registrations[0].label, "");
}

TEST(RegistryDeathTest, DuplicateNameIsFatalAndNamesBothSites) {
  EXPECT_DEATH(
      WidgetRegistry::Get().Register(
          "FooWidget", [](const google::protobuf::Any&, int) { return nullptr; },
          "elsewhere.cc:7"),
      "duplicate widget plugin name 'FooWidget': registered at core/registry_test.cc:[0-9]+ "
      "and again at elsewhere.cc:7");
}

TEST(EditDistanceTest, HandComputed) {
  EXPECT_EQ(EditDistance("", ""), 0);
  EXPECT_EQ(EditDistance("abc", ""), 3);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("DBNet", "dbnet"), 0);
  EXPECT_EQ(EditDistance("DBNett", "DBNet"), 1);
}

}  // namespace
}  // namespace vision::core
