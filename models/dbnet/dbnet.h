// The DBNet model plugin ("DBNet", options vision.models.dbnet.DBNetOptions).
//
// backbone (any registered Backbone with outputs at strides 4, 8, 16, 32) -> FPN neck ->
// DB head (db_head.h); losses in db_loss.h; training targets made on the data side by
// MakeTargetGenerator() (label_generator.h); Predict() post-processes the probability map
// (post_processor.h).
#ifndef VISION_MODELS_DBNET_DBNET_H_
#define VISION_MODELS_DBNET_DBNET_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backbone.h"
#include "core/batch.h"
#include "core/model.h"
#include "core/sample.h"
#include "core/target_generator.h"
#include "models/dbnet/db_head.h"
#include "models/dbnet/db_loss.h"
#include "models/dbnet/dbnet.pb.h"
#include "models/dbnet/label_generator.h"
#include "models/dbnet/post_processor.h"
#include "models/necks/fpn.h"

namespace vision::models::dbnet {

// DBNetOptions without protobuf and without the backbone (which is built from its own spec).
struct DBNetConfig {
  int64_t inner_channels = 256;
  double k = 50.0;
  DBHeadImplementation head_implementation = DBHeadImplementation::kPhaseMatmul;
  DBLossOptions loss;
  LabelGeneratorOptions labels;
  PostProcessorOptions post_process;
};

// Maps the proto to the struct; InvalidArgument naming the field when a value is unusable.
absl::StatusOr<DBNetConfig> ConfigFromProto(const DBNetOptions& options);

class DBNet : public core::Model {
 public:
  // `backbone` must return four levels at strides 4, 8, 16, 32.
  DBNet(std::shared_ptr<core::Backbone> backbone, const DBNetConfig& config);

  // Builds the backbone from options.backbone (required; core/backbone_builder.h) and checks
  // its strides.
  static absl::StatusOr<std::unique_ptr<DBNet>> Create(const DBNetOptions& options);

  // Probability (and, when `with_threshold`, threshold and binary) maps, [N, 1, H, W].
  DBHeadOutput Forward(const at::Tensor& images, bool with_threshold);

  // {"loss_prob", "loss_binary", "loss_thresh"}, already weighted by 1, alpha and beta (see
  // db_loss.h): the engine should sum them with weight 1. Reads batch.targets "gt", "mask",
  // "thresh_map", "thresh_mask" ([N, H, W] at the input's resolution); throws c10::Error
  // naming a missing or misshapen target.
  std::map<std::string, at::Tensor> Losses(const core::Batch& batch) override;

  // One Sample per image with `texts` (polygon, score) in original-image pixels, found on the
  // probability map; uses each sample's scale_x/scale_y and original size. Runs without
  // autograd; put the model in eval() first so BatchNorm uses its running statistics.
  std::vector<core::Sample> Predict(const core::Batch& batch) override;

  std::shared_ptr<const core::TargetGenerator> MakeTargetGenerator() const override;

  // Text polygons, class-agnostic: the maps separate text from background.
  std::optional<core::TaskRequirements> DataRequirements() const override {
    return core::TaskRequirements{core::AnnotationKind::kTextPolygons};
  }

  // "backbone.<stage>" names go to the backbone (e.g. "backbone.layer4" for a ResNet).
  absl::Status EnableActivationCheckpointing(const std::vector<std::string>& submodules) override;

  const DBNetConfig& config() const { return config_; }

 private:
  DBNetConfig config_;
  std::shared_ptr<core::Backbone> backbone_;
  necks::Fpn neck_{nullptr};
  DBHead head_{nullptr};
};

}  // namespace vision::models::dbnet

#endif  // VISION_MODELS_DBNET_DBNET_H_
