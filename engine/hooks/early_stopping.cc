// EarlyStopping: ends training when an evaluation metric has stopped improving (options and
// semantics in hooks.proto).
#include <cmath>
#include <cstdio>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/hook.h"
#include "engine/hooks/hooks.pb.h"

namespace vision::engine::hooks {
namespace {

class EarlyStopping : public core::Hook {
 public:
  static absl::StatusOr<std::unique_ptr<EarlyStopping>> Create(
      const EarlyStoppingOptions& options) {
    if (options.patience() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "EarlyStopping: patience must be >= 1 (evaluations without improvement), got ",
          options.patience()));
    }
    if (!(options.min_delta() >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("EarlyStopping: min_delta must be >= 0, got ", options.min_delta()));
    }
    return std::make_unique<EarlyStopping>(options);
  }
  explicit EarlyStopping(const EarlyStoppingOptions& options) : options_(options) {}

  absl::Status AfterEvaluation(core::TrainingRun& run,
                               const std::map<std::string, double>* metrics) override {
    if (metrics == nullptr) return absl::OkStatus();
    const std::string name = options_.metric().empty() ? run.main_metric() : options_.metric();
    auto found = metrics->find(name);
    if (found == metrics->end()) {
      std::vector<std::string> names;
      for (const auto& [n, v] : *metrics) names.push_back(n);
      return absl::InvalidArgumentError(absl::StrCat(
          "EarlyStopping: the evaluation gave no metric '", name, "' (it gave: ",
          absl::StrJoin(names, ", "), "); set the hook's metric option to one of them"));
    }
    const double value = found->second;
    const bool maximise = options_.mode() == EarlyStoppingOptions::MAX;
    const bool improved = !has_best_ || (maximise ? value > best_ + options_.min_delta()
                                                  : value < best_ - options_.min_delta());
    if (improved) {
      has_best_ = true;
      best_ = value;
      best_step_ = run.step();
      evaluations_without_improvement_ = 0;
      return absl::OkStatus();
    }
    if (++evaluations_without_improvement_ >= options_.patience()) {
      run.RequestStop(absl::StrFormat(
          "EarlyStopping: %s has not improved on %.6g (step %d) in %d evaluation(s)", name,
          best_, best_step_, evaluations_without_improvement_));
    }
    return absl::OkStatus();
  }

  std::string SaveState() const override {
    return absl::StrFormat("%d %.17g %d %d", has_best_ ? 1 : 0, best_, best_step_,
                           evaluations_without_improvement_);
  }
  absl::Status LoadState(const std::string& state) override {
    int has_best = 0;
    double best = 0;
    long long best_step = 0;
    int count = 0;
    char extra = 0;
    if (std::sscanf(state.c_str(), "%d %lf %lld %d %c", &has_best, &best, &best_step, &count,
                    &extra) != 4 ||
        (has_best != 0 && has_best != 1) || count < 0) {
      return absl::DataLossError(absl::StrCat(
          "EarlyStopping: the checkpoint's state '", state,
          "' is not '<has_best> <best> <best_step> <count>'; the checkpoint is damaged"));
    }
    has_best_ = has_best == 1;
    best_ = best;
    best_step_ = best_step;
    evaluations_without_improvement_ = count;
    return absl::OkStatus();
  }

 private:
  EarlyStoppingOptions options_;
  bool has_best_ = false;
  double best_ = 0;
  int64_t best_step_ = 0;
  int evaluations_without_improvement_ = 0;
};

}  // namespace

VISION_REGISTER_PLUGIN(core::HookRegistry, "EarlyStopping", EarlyStopping, EarlyStoppingOptions);

}  // namespace vision::engine::hooks
