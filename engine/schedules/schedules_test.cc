#include <memory>

#include "core/lr_schedule.h"
#include "core/lr_warmup.h"
#include "engine/schedules/schedules.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine::schedules {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<core::LrSchedule> Make(const char* name, const google::protobuf::Message& options) {
  google::protobuf::Any any;
  any.PackFrom(options);
  auto made = core::LrScheduleRegistry::Get().Create(name, any);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? std::move(made).value() : nullptr;
}

TEST(SchedulesTest, ConstantIsOne) {
  auto s = Make("Constant", ConstantOptions());
  EXPECT_EQ(s->Factor(0, 10), 1.0);
  EXPECT_EQ(s->Factor(9, 10), 1.0);
}

TEST(SchedulesTest, PolyHandComputed) {
  auto s = Make("Poly", PolyOptions());  // power 0.9
  EXPECT_DOUBLE_EQ(s->Factor(0, 100), 1.0);
  EXPECT_NEAR(s->Factor(50, 100), 0.5358867312681466, 1e-15);
  EXPECT_DOUBLE_EQ(s->Factor(100, 100), 0.0);
  PolyOptions floor;
  floor.set_power(1.0);
  floor.set_min_factor(0.2);
  auto f = Make("Poly", floor);
  EXPECT_DOUBLE_EQ(f->Factor(25, 100), 0.75);
  EXPECT_DOUBLE_EQ(f->Factor(90, 100), 0.2);
}

TEST(SchedulesTest, CosineHandComputed) {
  auto s = Make("Cosine", CosineOptions());
  EXPECT_DOUBLE_EQ(s->Factor(0, 100), 1.0);
  EXPECT_NEAR(s->Factor(25, 100), 0.8535533905932737, 1e-15);
  EXPECT_NEAR(s->Factor(50, 100), 0.5, 1e-15);
  EXPECT_NEAR(s->Factor(100, 100), 0.0, 1e-15);
  CosineOptions with_min;
  with_min.set_min_factor(0.1);
  EXPECT_NEAR(Make("Cosine", with_min)->Factor(25, 100), 0.8681980515339464, 1e-15);
}

TEST(SchedulesTest, MultiStepHandComputed) {
  MultiStepOptions o;
  o.add_milestones(10);
  o.add_milestones(20);
  auto s = Make("MultiStep", o);
  EXPECT_DOUBLE_EQ(s->Factor(9, 100), 1.0);
  EXPECT_NEAR(s->Factor(10, 100), 0.1, 1e-15);
  EXPECT_NEAR(s->Factor(19, 100), 0.1, 1e-15);
  EXPECT_NEAR(s->Factor(25, 100), 0.01, 1e-15);
}

TEST(SchedulesTest, WarmupRampsLinearlyThenFollowsTheSchedule) {
  PolyOptions linear;
  linear.set_power(1.0);
  core::WarmupSchedule s(Make("Poly", linear), /*warmup_steps=*/10, /*start_factor=*/0.1);
  EXPECT_DOUBLE_EQ(s.Factor(0, 100), 1.0 * 0.1);
  EXPECT_DOUBLE_EQ(s.Factor(5, 100), 0.95 * 0.55);
  EXPECT_DOUBLE_EQ(s.Factor(10, 100), 0.9);
  EXPECT_DOUBLE_EQ(s.Factor(60, 100), 0.4);
}

TEST(SchedulesTest, LinearScalingRule) {
  EXPECT_DOUBLE_EQ(core::ScaledLearningRate(0.007, 16, 16), 0.007);
  EXPECT_DOUBLE_EQ(core::ScaledLearningRate(0.007, 64, 16), 0.028);
  EXPECT_DOUBLE_EQ(core::ScaledLearningRate(0.02, 8, 16), 0.01);
  EXPECT_DOUBLE_EQ(core::ScaledLearningRate(0.02, 8, 0), 0.02);
}

TEST(SchedulesTest, BadOptionsNameTheField) {
  MultiStepOptions unsorted;
  unsorted.add_milestones(20);
  unsorted.add_milestones(10);
  google::protobuf::Any any;
  any.PackFrom(unsorted);
  auto made = core::LrScheduleRegistry::Get().Create("MultiStep", any);
  EXPECT_THAT(made.status().message(), HasSubstr("lr_schedule.options.milestones[1]"));
  PolyOptions negative;
  negative.set_power(-1);
  any.PackFrom(negative);
  made = core::LrScheduleRegistry::Get().Create("Poly", any);
  EXPECT_THAT(made.status().message(), HasSubstr("lr_schedule.options.power: must be > 0"));
}

}  // namespace
}  // namespace vision::engine::schedules
