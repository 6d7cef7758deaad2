#include "core/param_groups.h"

#include <map>
#include <string>

#include "absl/strings/match.h"

namespace vision::core {

std::vector<ParamGroupSpec> MakeParamGroups(const torch::nn::Module& model,
                                            const OptimizerConfig& config, double lr) {
  // Fully qualified names of the parameters that belong directly to a norm module.
  std::map<std::string, bool> is_norm_param;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const bool norm = absl::StrContains(item.value()->name(), "Norm");
    for (const auto& param : item.value()->named_parameters(/*recurse=*/false)) {
      const std::string full = item.key().empty() ? param.key() : item.key() + "." + param.key();
      is_norm_param[full] = norm;
    }
  }
  ParamGroupSpec groups[4];
  const char* names[4] = {"decay", "no_decay", "backbone_decay", "backbone_no_decay"};
  for (int i = 0; i < 4; ++i) {
    groups[i].name = names[i];
    const bool backbone = i >= 2, no_decay = i % 2 == 1;
    groups[i].lr = backbone ? lr * config.backbone_lr_multiplier() : lr;
    groups[i].weight_decay = no_decay ? 0.0 : config.weight_decay();
  }
  for (const auto& param : model.named_parameters(/*recurse=*/true)) {
    if (!param.value().requires_grad()) continue;
    const std::string& name = param.key();
    const bool backbone = absl::StartsWith(name, "backbone.");
    const bool no_decay = config.no_weight_decay_on_norm_and_bias() &&
                          (is_norm_param[name] || absl::EndsWith(name, "bias"));
    groups[(backbone ? 2 : 0) + (no_decay ? 1 : 0)].params.push_back(param.value());
  }
  std::vector<ParamGroupSpec> result;
  for (ParamGroupSpec& group : groups) {
    if (!group.params.empty()) result.push_back(std::move(group));
  }
  return result;
}

}  // namespace vision::core
