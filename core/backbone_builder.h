// The one way a model builds its backbone from the PluginSpec in its options, with one policy
// for a missing backbone for every model: it is required. No model picks a network on the
// user's behalf, so a recipe always says what it trains (and a checkpoint's config says what it
// holds); a spec without a type is an error that shows the model's suggestion to paste.
#ifndef VISION_CORE_BACKBONE_BUILDER_H_
#define VISION_CORE_BACKBONE_BUILDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backbone.h"
#include "core/config/plugin_spec.pb.h"

namespace vision::core {

// What a model asks of its backbone.
struct BackboneNeeds {
  // The options field, for errors: "DBNetOptions.backbone".
  std::string field;
  // The levels the model reads (0: any number) and their strides (empty: any), fine to coarse.
  size_t levels = 0;
  std::vector<int64_t> strides;
  // Why, for the error when the backbone gives other levels: "DBNet's FPN needs four levels at
  // strides 4, 8, 16, 32".
  std::string requirement;
  // Shown when the backbone is missing: what to write, e.g. the paper's choice as text format.
  std::string suggestion;
};

// The registered backbone `spec.type` made from `spec.options`, checked against `needs`. Errors
// start with needs.field: a missing type ("required; <suggestion>"), the registry's miss (which
// lists the registered names), the plugin's own option errors, or levels that do not fit.
absl::StatusOr<std::shared_ptr<Backbone>> BuildBackbone(const PluginSpec& spec,
                                                        const BackboneNeeds& needs);

}  // namespace vision::core

#endif  // VISION_CORE_BACKBONE_BUILDER_H_
