// Constant, Poly, Cosine and MultiStep learning-rate schedules.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/lr_schedule.h"
#include "core/status_macros.h"
#include "engine/schedules/schedules.pb.h"

namespace vision::engine::schedules {
namespace {

double Progress(int64_t step, int64_t total_steps) {
  if (total_steps <= 0) return 1.0;
  return std::clamp(static_cast<double>(step) / static_cast<double>(total_steps), 0.0, 1.0);
}

absl::Status CheckMinFactor(double min_factor) {
  if (min_factor < 0 || min_factor > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr_schedule.options.min_factor: must be in [0, 1], got ", min_factor));
  }
  return absl::OkStatus();
}

class Constant : public core::LrSchedule {
 public:
  static absl::StatusOr<std::unique_ptr<Constant>> Create(const ConstantOptions&) {
    return std::make_unique<Constant>();
  }
  double Factor(int64_t, int64_t) const override { return 1.0; }
};

class Poly : public core::LrSchedule {
 public:
  explicit Poly(const PolyOptions& o) : power_(o.power()), min_factor_(o.min_factor()) {}
  static absl::StatusOr<std::unique_ptr<Poly>> Create(const PolyOptions& o) {
    if (o.power() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("lr_schedule.options.power: must be > 0, got ", o.power()));
    }
    VISION_RETURN_IF_ERROR(CheckMinFactor(o.min_factor()));
    return std::make_unique<Poly>(o);
  }
  double Factor(int64_t step, int64_t total_steps) const override {
    return std::max(min_factor_, std::pow(1.0 - Progress(step, total_steps), power_));
  }

 private:
  double power_;
  double min_factor_;
};

class Cosine : public core::LrSchedule {
 public:
  explicit Cosine(const CosineOptions& o) : min_factor_(o.min_factor()) {}
  static absl::StatusOr<std::unique_ptr<Cosine>> Create(const CosineOptions& o) {
    VISION_RETURN_IF_ERROR(CheckMinFactor(o.min_factor()));
    return std::make_unique<Cosine>(o);
  }
  double Factor(int64_t step, int64_t total_steps) const override {
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * Progress(step, total_steps)));
    return min_factor_ + (1.0 - min_factor_) * cosine;
  }

 private:
  double min_factor_;
};

class MultiStep : public core::LrSchedule {
 public:
  explicit MultiStep(const MultiStepOptions& o)
      : milestones_(o.milestones().begin(), o.milestones().end()), gamma_(o.gamma()) {}
  static absl::StatusOr<std::unique_ptr<MultiStep>> Create(const MultiStepOptions& o) {
    if (o.milestones().empty()) {
      return absl::InvalidArgumentError(
          "lr_schedule.options.milestones: required, the steps at which to decay");
    }
    for (int i = 0; i < o.milestones_size(); ++i) {
      if (o.milestones(i) <= 0 || (i > 0 && o.milestones(i) <= o.milestones(i - 1))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "lr_schedule.options.milestones[", i, "]: must be positive and increasing, got ",
            o.milestones(i)));
      }
    }
    if (o.gamma() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("lr_schedule.options.gamma: must be > 0, got ", o.gamma()));
    }
    return std::make_unique<MultiStep>(o);
  }
  double Factor(int64_t step, int64_t) const override {
    const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), step) -
                        milestones_.begin();
    return std::pow(gamma_, static_cast<double>(passed));
  }

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

VISION_REGISTER_PLUGIN(core::LrScheduleRegistry, "Constant", Constant, ConstantOptions);
VISION_REGISTER_PLUGIN(core::LrScheduleRegistry, "Poly", Poly, PolyOptions);
VISION_REGISTER_PLUGIN(core::LrScheduleRegistry, "Cosine", Cosine, CosineOptions);
VISION_REGISTER_PLUGIN(core::LrScheduleRegistry, "MultiStep", MultiStep, MultiStepOptions);

}  // namespace
}  // namespace vision::engine::schedules
