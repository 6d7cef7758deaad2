// Checks that a pipeline's datasets, model and evaluator agree on what the data is: the kind of
// annotations, the number of classes, and (between the training and evaluation splits) the
// class table, so that a config that pairs a text detector with COCO, or a 5-class model with a
// 4-class dataset, stops when it is built with an error naming the fields and values.
#ifndef VISION_CORE_DATA_AGREEMENT_H_
#define VISION_CORE_DATA_AGREEMENT_H_

#include "absl/status/status.h"
#include "core/config/pipeline.pb.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/model.h"

namespace vision::core {

// Null components are absent (eval needs no training data); a component whose Metadata() or
// DataRequirements() is nullopt is not checked. `config` names the plugins in messages.
// InvalidArgument on the first disagreement, naming the config fields on both sides, their
// values and what to change.
absl::Status CheckDataAgreement(const TrainPipelineConfig& config, const Model* model,
                                const Dataset* train_dataset, const Dataset* eval_dataset,
                                const Evaluator* evaluator);

}  // namespace vision::core

#endif  // VISION_CORE_DATA_AGREEMENT_H_
