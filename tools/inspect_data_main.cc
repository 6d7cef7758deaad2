// Shows what a model is fed: writes N samples of a config's training (or evaluation) data,
// after its augmentations and the model's target generation, as PNG files with every
// annotation drawn (texts green, don't-care grey; objects with their masks filled, box and
// label in a colour per class, crowd regions hatched grey; label maps blended in) and each
// training target as a heat map beside the image:
//   inspect_data --config=models/dbnet/configs/quickstart.pbtxt --num=8 --output_dir=out
// The config needs only its data sections (and a model, if its targets should be shown).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/atomic_output.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "data/loader/loader.h"
#include "engine/draw.h"
#include "distributed/sampler/distributed_sampler.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Path of the pipeline config (.pbtxt).");
ABSL_FLAG(std::string, split, "train", "\"train\" (train_data, with targets) or \"eval\" (eval_data).");
ABSL_FLAG(int, num, 8, "How many samples to write.");
ABSL_FLAG(int, epoch, 0, "Which epoch's order and augmentation draws to show.");
ABSL_FLAG(std::string, output_dir, "", "Where the PNG files go.");

namespace vision::tools {
namespace {

namespace fs = std::filesystem;

cv::Mat Draw(const core::Sample& s) {
  cv::Mat image = engine::Displayable(s.image);
  engine::DrawAnnotations(s, engine::DrawOptions(), &image);
  return engine::WithTargetsBeside(image, s.targets);
}

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  const std::string split = absl::GetFlag(FLAGS_split);
  if (absl::GetFlag(FLAGS_config).empty() || output_dir.empty()) {
    return absl::InvalidArgumentError("--config and --output_dir are required");
  }
  if (split != "train" && split != "eval") {
    return absl::InvalidArgumentError(absl::StrCat("--split must be train or eval, got '", split, "'"));
  }
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), overrides,
                                                   core::ConfigUse::kDataOnly));
  const bool train = split == "train";
  if (train && !config.has_train_data()) {
    return absl::InvalidArgumentError("the config has no train_data (use --split=eval?)");
  }
  if (!train && !config.has_eval_data()) return absl::InvalidArgumentError("the config has no eval_data");
  const core::DataConfig& data = train ? config.train_data() : config.eval_data();
  const std::string field = train ? "train_data" : "eval_data";
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::Dataset> dataset, core::BuildDataset(data, field));
  std::printf("%s: %s\n", field.c_str(), dataset->Describe().c_str());
  if (const std::optional<core::DatasetMetadata> metadata = dataset->Metadata()) {
    std::printf("annotations: %s\n", core::DescribeMetadata(*metadata).c_str());
  }
  VISION_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<core::Augmentation>> augmentations,
                          core::BuildAugmentations(data, field));
  std::shared_ptr<const core::TargetGenerator> targets;
  if (train && config.has_model()) {
    VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> model, core::BuildModel(config.model()));
    targets = model->MakeTargetGenerator();
  }
  std::vector<const core::Augmentation*> pointers;
  for (const auto& a : augmentations) pointers.push_back(a.get());
  // The order one process of a training run sees.
  distributed::sampler::DistributedSamplerOptions so;
  so.dataset_size = dataset->Size();
  so.shuffle = train && data.loader().shuffle();
  so.seed = config.seed();
  VISION_ASSIGN_OR_RETURN(distributed::sampler::DistributedSampler sampler,
                          distributed::sampler::DistributedSampler::Create(so));
  const std::vector<int64_t> order = sampler.Indices(absl::GetFlag(FLAGS_epoch));
  // The drawings appear together when all were written (README, "Data policies").
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::StagedDirectory> staged,
                          core::StagedDirectory::Create(output_dir));
  const int n = std::min<int>(absl::GetFlag(FLAGS_num), static_cast<int>(order.size()));
  for (int i = 0; i < n; ++i) {
    VISION_ASSIGN_OR_RETURN(core::Sample sample,
                            data::LoadSample(*dataset, pointers, targets.get(), order[i],
                                             config.seed(), absl::GetFlag(FLAGS_epoch)));
    const std::string name = fs::path(sample.image_path).stem().string();
    const std::string file = absl::StrFormat("%03d_%s.png", i, name);
    const std::string path = (fs::path(staged->path()) / file).string();
    if (!cv::imwrite(path, Draw(sample))) return absl::InternalError(absl::StrCat("cannot write ", path));
    std::printf("%s: %zu texts, %zu objects, %zu targets\n",
                (fs::path(output_dir) / file).string().c_str(), sample.texts.size(),
                sample.objects.size(), sample.targets.size());
  }
  return staged->Commit();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "Writes augmented samples with annotations and training targets drawn: inspect_data "
      "--config=FILE --output_dir=DIR [--split=train|eval] [--num=N] [--override='TEXT' ...]",
      vision::tools::Run);
}
