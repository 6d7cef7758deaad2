#include "core/backbone_builder.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/status_util.h"

namespace vision::core {

absl::StatusOr<std::shared_ptr<Backbone>> BuildBackbone(const PluginSpec& spec,
                                                        const BackboneNeeds& needs) {
  if (spec.type().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(needs.field, ": required; ", needs.suggestion));
  }
  VISION_ASSIGN_OR_RETURN(
      std::unique_ptr<Backbone> backbone,
      WithContext(needs.field, BackboneRegistry::Get().Create(spec.type(), spec.options())));
  const std::vector<int64_t> strides = backbone->Strides();
  const size_t levels = backbone->OutChannels().size();
  if ((needs.levels > 0 && levels != needs.levels) ||
      (!needs.strides.empty() && strides != needs.strides)) {
    return absl::InvalidArgumentError(absl::StrCat(
        needs.field, ": ", needs.requirement, "; backbone '", spec.type(), "' gives ", levels,
        " levels at strides [", absl::StrJoin(strides, ", "), "]; configure it to output those"));
  }
  return std::shared_ptr<Backbone>(std::move(backbone));
}

}  // namespace vision::core
