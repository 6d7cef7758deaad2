#include "core/config/loader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/nesting.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"

namespace vision::core {
namespace {

// DataConfig.max_image_pixels's ceiling: OpenCV's own limit, core/image_io.h's
// kLargestMaxImagePixels (not included, to keep OpenCV out of the config loader's users).
constexpr int64_t kLargestMaxImagePixels = int64_t{1} << 30;

// Collects parser errors as "source:line:column: message" (1-based, as editors count).
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit ErrorCollector(std::string source) : source_(std::move(source)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {}
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config path '", path, "' is not a regular file. Pass a .pbtxt file with --config."));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open config file '", path,
                                            "': ", std::strerror(errno),
                                            ". Pass an existing .pbtxt with --config."));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error while reading '", path, "'"));
  return text.str();
}

// Accumulates validation problems as "field.path: what is wrong".
class Problems {
 public:
  void Add(const std::string& field, const std::string& what) {
    items_.push_back(absl::StrCat(field, ": ", what));
  }
  void Require(bool ok, const std::string& field, const std::string& what) {
    if (!ok) Add(field, what);
  }
  bool empty() const { return items_.empty(); }
  std::string Joined() const { return absl::StrJoin(items_, "\n  "); }

 private:
  std::vector<std::string> items_;
};

void CheckPluginSpec(const PluginSpec& spec, bool present, const std::string& field,
                     const std::string& example, Problems* problems) {
  if (!present || spec.type().empty()) {
    problems->Add(field + ".type", absl::StrCat("required: name a registered plugin, e.g. ",
                                                example, " (see --list_plugins)"));
  }
}

void CheckData(const DataConfig& data, const std::string& field, Problems* problems) {
  CheckPluginSpec(data.dataset(), data.has_dataset(), field + ".dataset", "type: \"ICDAR2015\"",
                  problems);
  for (int i = 0; i < data.augmentations_size(); ++i) {
    if (data.augmentations(i).type().empty()) {
      problems->Add(absl::StrCat(field, ".augmentations[", i, "].type"),
                    "required: name a registered augmentation");
    }
  }
  problems->Require(
      data.max_image_pixels() > 0 && data.max_image_pixels() <= kLargestMaxImagePixels,
      field + ".max_image_pixels",
      absl::StrCat("must be a pixel count in [1, 2^30 = ", kLargestMaxImagePixels,
                   "] (OpenCV decodes no more), got ", data.max_image_pixels()));
  const LoaderConfig& loader = data.loader();
  problems->Require(loader.batch_size() > 0, field + ".loader.batch_size",
                    absl::StrCat("must be > 0 (images per process and step), got ",
                                 loader.batch_size()));
  problems->Require(loader.num_workers() >= 0, field + ".loader.num_workers",
                    absl::StrCat("must be >= 0, got ", loader.num_workers()));
  problems->Require(loader.prefetch_batches() >= 1, field + ".loader.prefetch_batches",
                    absl::StrCat("must be >= 1, got ", loader.prefetch_batches()));
  problems->Require(
      loader.max_bad_sample_fraction() >= 0 && loader.max_bad_sample_fraction() <= 1,
      field + ".loader.max_bad_sample_fraction",
      absl::StrCat("must be a share in [0, 1], got ", loader.max_bad_sample_fraction()));
  // As data/loader/aspect_ratio_groups.h's kMaxAspectRatioGroupFactor (core does not depend on
  // the loader).
  constexpr int kMaxGroupFactor = 1000;
  problems->Require(
      loader.aspect_ratio_group_factor() >= -1 &&
          loader.aspect_ratio_group_factor() <= kMaxGroupFactor,
      field + ".loader.aspect_ratio_group_factor",
      absl::StrCat("must be -1 (off) or a factor in [0, ", kMaxGroupFactor, "] (torchvision's ",
                   "detection recipes use 3), got ", loader.aspect_ratio_group_factor()));
  problems->Require(field != "eval_data" || loader.aspect_ratio_group_factor() == -1,
                    field + ".loader.aspect_ratio_group_factor",
                    "groups training batches only (evaluation reads every image once, in order); "
                    "leave it unset here");
}

void CheckSegmentationInference(const SegmentationInferenceConfig& c, const std::string& field,
                                Problems* problems) {
  for (int i = 0; i < c.scales_size(); ++i) {
    problems->Require(c.scales(i) > 0 && std::isfinite(c.scales(i)),
                      absl::StrCat(field, ".scales[", i, "]"),
                      absl::StrCat("must be a finite number > 0 (a factor of the image as fed), got ",
                                   c.scales(i)));
  }
  const bool crop = c.crop_height() != 0 || c.crop_width() != 0;
  if (crop) {
    problems->Require(c.crop_height() > 0 && c.crop_width() > 0, field + ".crop_height",
                      absl::StrCat("crop_height and crop_width must both be > 0 for sliding windows ",
                                   "(or both 0 for whole images), got ", c.crop_height(), " x ",
                                   c.crop_width()));
  }
  const std::pair<const char*, std::pair<int32_t, int32_t>> strides[] = {
      {"stride_height", {c.stride_height(), c.crop_height()}},
      {"stride_width", {c.stride_width(), c.crop_width()}}};
  for (const auto& [name, values] : strides) {
    const auto [stride, size] = values;
    if (stride == 0) continue;
    if (!crop) {
      problems->Add(absl::StrCat(field, ".", name),
                    absl::StrCat("is ", stride, " but there is no crop: set crop_height and ",
                                 "crop_width for sliding windows, or leave the stride unset"));
    } else if (stride < 0 || (size > 0 && stride > size)) {
      problems->Add(absl::StrCat(field, ".", name),
                    absl::StrCat("must be in [1, ", size, "] (at most the crop, or windows leave ",
                                 "pixels uncovered; 0: two thirds of the crop), got ", stride));
    }
  }
  problems->Require(c.max_batch_size() >= 0, field + ".max_batch_size",
                    absl::StrCat("must be >= 0 (0: the eval loader's batch size), got ",
                                 c.max_batch_size()));
  // Window settings without windows would silently do nothing.
  if (!crop && c.window_placement() != SegmentationInferenceConfig::SHIFT_INSIDE) {
    problems->Add(field + ".window_placement",
                  "is set but there is no crop: set crop_height and crop_width for sliding "
                  "windows, or leave window_placement unset");
  }
  if (!crop && c.pad_value_size() > 0) {
    problems->Add(field + ".pad_value",
                  "is set but there is no crop (only windows are padded): set crop_height and "
                  "crop_width, or leave pad_value unset");
  }
  problems->Require(c.pad_value_size() == 0 || c.pad_value_size() == 1 || c.pad_value_size() == 3,
                    field + ".pad_value",
                    absl::StrCat("give one value for every channel or one per channel (3), got ",
                                 c.pad_value_size(), " values"));
  for (int i = 0; i < c.pad_value_size(); ++i) {
    problems->Require(std::isfinite(c.pad_value(i)), absl::StrCat(field, ".pad_value[", i, "]"),
                      absl::StrCat("must be finite, got ", c.pad_value(i)));
  }
}

bool ValidDevice(const std::string& device) {
  if (device == "cpu" || device == "cuda") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return false;
  for (size_t i = 5; i < device.size(); ++i) {
    if (device[i] < '0' || device[i] > '9') return false;
  }
  return true;
}

// Protobuf's MergeFrom treats an Any as opaque bytes, so an override of one plugin option
// would erase the plugin's other options. This merge descends into Any payloads of the same
// type: `--override='model { options { [type.googleapis.com/X] { k: 30 } } }'` changes k only.
// Repeated fields append (overrides), or with `replace_repeated` replace the list (a recipe
// over its base).
void MergeAnyAware(const google::protobuf::Message& from, google::protobuf::Message* to,
                   bool replace_repeated = false) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* from_reflection = from.GetReflection();
  const google::protobuf::Reflection* to_reflection = to->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  from_reflection->ListFields(from, &fields);
  // Scalars replace and repeated fields append (the standard merge) in one MergeFrom of a copy
  // without the singular message fields, which are merged recursively below.
  std::unique_ptr<google::protobuf::Message> flat(from.New());
  flat->CopyFrom(from);
  std::vector<const FieldDescriptor*> nested;
  for (const FieldDescriptor* field : fields) {
    if (!field->is_repeated() && field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      flat->GetReflection()->ClearField(flat.get(), field);
      nested.push_back(field);
    } else if (field->is_repeated() && replace_repeated) {
      to_reflection->ClearField(to, field);
    }
  }
  to->MergeFrom(*flat);
  for (const FieldDescriptor* field : nested) {
    const google::protobuf::Message& from_sub = from_reflection->GetMessage(from, field);
    google::protobuf::Message* to_sub = to_reflection->MutableMessage(to, field);
    auto* from_any = dynamic_cast<const google::protobuf::Any*>(&from_sub);
    auto* to_any = dynamic_cast<google::protobuf::Any*>(to_sub);
    if (from_any != nullptr && to_any != nullptr) {
      const std::string& url = from_any->type_url();
      const google::protobuf::Descriptor* type =
          google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
              url.substr(url.rfind('/') + 1));
      if (type != nullptr && to_any->type_url() == url) {
        // Generated (not dynamic) messages, so nested Any fields are google::protobuf::Any.
        const google::protobuf::Message* prototype =
            google::protobuf::MessageFactory::generated_factory()->GetPrototype(type);
        std::unique_ptr<google::protobuf::Message> from_payload(prototype->New());
        std::unique_ptr<google::protobuf::Message> to_payload(prototype->New());
        if (from_payload->ParseFromString(from_any->value()) &&
            to_payload->ParseFromString(to_any->value())) {
          MergeAnyAware(*from_payload, to_payload.get(), replace_repeated);
          to_payload->SerializeToString(to_any->mutable_value());
          continue;
        }
      }
      to_any->CopyFrom(*from_any);
      continue;
    }
    MergeAnyAware(from_sub, to_sub, replace_repeated);
  }
}

// Parses one text-format config (named `source` in errors).
absl::StatusOr<TrainPipelineConfig> ParseConfigText(const std::string& text,
                                                    const std::string& source) {
  VISION_RETURN_IF_ERROR(CheckNesting(source, text, TextSyntax::kProtoText,
                                      "a pipeline config nests at most about 8 deep"));
  ErrorCollector errors(source);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.SetRecursionLimit(kMaxNestingDepth);
  TrainPipelineConfig parsed;
  if (!parser.ParseFromString(text, &parsed)) {
    std::string message = errors.errors().empty() ? absl::StrCat(source, ": parse error")
                                                  : absl::StrJoin(errors.errors(), "\n");
    return absl::InvalidArgumentError(message);
  }
  return parsed;
}

// A recipe chain is short (detectron2's and MMEngine's are 2-4 files); a longer one is a
// mistake, and the bound keeps a cycle through differently spelled paths finite.
constexpr int kMaxBaseDepth = 8;

// `path` with its `base` chain resolved: the base loaded first (recursively), this file laid
// over it with repeated fields replacing. `chain` holds the files that include this one.
absl::StatusOr<TrainPipelineConfig> LoadWithBases(const std::string& path,
                                                  std::vector<std::string>* chain) {
  const std::string normal = std::filesystem::path(path).lexically_normal().string();
  if (std::find(chain->begin(), chain->end(), normal) != chain->end() ||
      static_cast<int>(chain->size()) >= kMaxBaseDepth) {
    chain->push_back(normal);
    // FailedPrecondition: passed up unwrapped, the chain says it all.
    return absl::FailedPreconditionError(absl::StrCat(
        chain->size() > static_cast<size_t>(kMaxBaseDepth) ? "base chain longer than 8 files: "
                                                           : "base chain is a cycle: ",
        absl::StrJoin(*chain, " -> "), "; a recipe's base must not include it again"));
  }
  chain->push_back(normal);
  VISION_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  VISION_ASSIGN_OR_RETURN(TrainPipelineConfig config, ParseConfigText(text, path));
  if (!config.has_base()) return config;
  std::string base = config.base();
  if (std::filesystem::path(base).is_relative()) {
    base = (std::filesystem::path(path).parent_path() / base).string();
  }
  absl::StatusOr<TrainPipelineConfig> merged = LoadWithBases(base, chain);
  if (!merged.ok()) {
    if (absl::IsFailedPrecondition(merged.status())) return merged.status();
    return absl::Status(merged.status().code(),
                        absl::StrCat(path, ": base: \"", config.base(), "\" (", base,
                                     "): ", merged.status().message()));
  }
  config.clear_base();
  MergeAnyAware(config, &*merged, /*replace_repeated=*/true);
  return merged;
}

}  // namespace

absl::Status MergeConfigText(const std::string& text, const std::string& source,
                             TrainPipelineConfig* config) {
  VISION_ASSIGN_OR_RETURN(const TrainPipelineConfig parsed, ParseConfigText(text, source));
  if (parsed.has_base()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": base: is read in config files only (their first load); put it "
                             "in the .pbtxt, or give the base file as --config"));
  }
  MergeAnyAware(parsed, config);
  return absl::OkStatus();
}

absl::StatusOr<TrainPipelineConfig> LoadPipelineConfig(const std::string& path,
                                                       const std::vector<std::string>& overrides,
                                                       ConfigUse use) {
  std::vector<std::string> chain;
  VISION_ASSIGN_OR_RETURN(TrainPipelineConfig config, LoadWithBases(path, &chain));
  for (size_t i = 0; i < overrides.size(); ++i) {
    const std::string source = absl::StrCat("--override #", i + 1, " '", overrides[i], "'");
    VISION_RETURN_IF_ERROR(MergeConfigText(overrides[i], source, &config));
  }
  VISION_RETURN_IF_ERROR(WithContext(path, ValidatePipelineConfig(config, use)));
  return config;
}

absl::Status ValidatePipelineConfig(const TrainPipelineConfig& c, ConfigUse use) {
  Problems p;
  if (use == ConfigUse::kDataOnly) {
    if (c.has_model()) CheckPluginSpec(c.model(), true, "model", "type: \"DBNet\"", &p);
    p.Require(c.has_train_data() || c.has_eval_data(), "train_data",
              "required (or eval_data): the dataset to look at");
    if (c.has_train_data()) CheckData(c.train_data(), "train_data", &p);
    if (c.has_eval_data()) CheckData(c.eval_data(), "eval_data", &p);
    if (p.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("invalid config:\n  ", p.Joined()));
  }
  CheckPluginSpec(c.model(), c.has_model(), "model", "type: \"DBNet\"", &p);
  if (!c.has_train_data()) {
    p.Add("train_data", "required: the training dataset and loader settings");
  } else {
    CheckData(c.train_data(), "train_data", &p);
  }
  if (c.has_eval_data()) CheckData(c.eval_data(), "eval_data", &p);
  if (c.evaluation().has_evaluator()) {
    CheckPluginSpec(c.evaluation().evaluator(), true, "evaluation.evaluator",
                    "type: \"ICDAR2015Hmean\"", &p);
    p.Require(c.has_eval_data(), "eval_data",
              "required when evaluation.evaluator is set: the data to evaluate on");
  }
  for (int i = 0; i < c.hooks_size(); ++i) {
    CheckPluginSpec(c.hooks(i), true, absl::StrCat("hooks[", i, "]"), "type: \"EarlyStopping\"",
                    &p);
  }
  const TraceConfig& trace = c.logging().trace();
  p.Require(trace.start_step() >= 0 && trace.num_steps() >= 0, "logging.trace",
            absl::StrCat("start_step (", trace.start_step(), ") and num_steps (",
                         trace.num_steps(), ") must be >= 0; num_steps: 0 turns tracing off"));
  p.Require(c.evaluation().every_n_steps() >= 0, "evaluation.every_n_steps",
            absl::StrCat("must be >= 0, got ", c.evaluation().every_n_steps()));
  if (c.evaluation().has_segmentation_inference()) {
    CheckSegmentationInference(c.evaluation().segmentation_inference(),
                               "evaluation.segmentation_inference", &p);
  }

  const OptimizerConfig& opt = c.optimizer();
  p.Require(!opt.type().empty(), "optimizer.type",
            "required: a registered optimizer, e.g. \"SGD\" (see --list_plugins)");
  p.Require(opt.has_lr(), "optimizer.lr", "required: the base learning rate");
  if (opt.has_lr()) {
    p.Require(opt.lr() > 0, "optimizer.lr", absl::StrCat("must be > 0, got ", opt.lr()));
  }
  p.Require(opt.weight_decay() >= 0, "optimizer.weight_decay",
            absl::StrCat("must be >= 0, got ", opt.weight_decay()));
  p.Require(opt.backbone_lr_multiplier() >= 0, "optimizer.backbone_lr_multiplier",
            absl::StrCat("must be >= 0, got ", opt.backbone_lr_multiplier()));
  if (opt.has_reference_batch_size()) {
    p.Require(opt.reference_batch_size() > 0, "optimizer.reference_batch_size",
              absl::StrCat("must be > 0, got ", opt.reference_batch_size()));
  }

  const LrScheduleConfig& lr = c.lr_schedule();
  p.Require(!lr.type().empty(), "lr_schedule.type", "must name a registered schedule");
  p.Require(lr.warmup_steps() >= 0, "lr_schedule.warmup_steps",
            absl::StrCat("must be >= 0, got ", lr.warmup_steps()));
  p.Require(lr.warmup_start_factor() > 0 && lr.warmup_start_factor() <= 1,
            "lr_schedule.warmup_start_factor",
            absl::StrCat("must be in (0, 1], got ", lr.warmup_start_factor()));

  const TrainLoopConfig& t = c.train();
  const bool steps = t.has_max_steps(), epochs = t.has_max_epochs();
  if (steps == epochs) {
    p.Add("train", "set exactly one of max_steps or max_epochs");
  } else if (steps) {
    p.Require(t.max_steps() > 0, "train.max_steps", absl::StrCat("must be > 0, got ", t.max_steps()));
  } else {
    p.Require(t.max_epochs() > 0, "train.max_epochs",
              absl::StrCat("must be > 0, got ", t.max_epochs()));
  }
  p.Require(t.gradient_accumulation_steps() >= 1, "train.gradient_accumulation_steps",
            absl::StrCat("must be >= 1, got ", t.gradient_accumulation_steps()));
  p.Require(t.clip_grad_norm() >= 0, "train.clip_grad_norm",
            absl::StrCat("must be >= 0 (0 disables), got ", t.clip_grad_norm()));
  p.Require(t.ema_decay() >= 0 && t.ema_decay() < 1, "train.ema_decay",
            absl::StrCat("must be in [0, 1) (0 disables), got ", t.ema_decay()));
  for (const auto& [name, weight] : t.loss_weights()) {
    p.Require(weight >= 0, absl::StrCat("train.loss_weights[\"", name, "\"]"),
              absl::StrCat("must be >= 0, got ", weight));
  }

  const MixedPrecisionConfig& mp = c.mixed_precision();
  p.Require(mp.init_scale() > 0, "mixed_precision.init_scale",
            absl::StrCat("must be > 0, got ", mp.init_scale()));
  p.Require(mp.growth_factor() > 1, "mixed_precision.growth_factor",
            absl::StrCat("must be > 1, got ", mp.growth_factor()));
  p.Require(mp.backoff_factor() > 0 && mp.backoff_factor() < 1, "mixed_precision.backoff_factor",
            absl::StrCat("must be in (0, 1), got ", mp.backoff_factor()));
  p.Require(mp.growth_interval() > 0, "mixed_precision.growth_interval",
            absl::StrCat("must be > 0, got ", mp.growth_interval()));
  p.Require(mp.max_consecutive_nonfinite_steps() > 0,
            "mixed_precision.max_consecutive_nonfinite_steps",
            absl::StrCat("must be > 0, got ", mp.max_consecutive_nonfinite_steps()));
  if (mp.enabled() && mp.dtype() == MixedPrecisionConfig::FLOAT16 && c.device() == "cpu") {
    p.Add("mixed_precision.dtype", "FLOAT16 autocast needs a CUDA device; use BFLOAT16 on cpu");
  }

  const DistributedConfig& d = c.distributed();
  p.Require(d.timeout_seconds() > 0, "distributed.timeout_seconds",
            absl::StrCat("must be > 0, got ", d.timeout_seconds()));
  if (d.has_strategy()) {
    CheckPluginSpec(d.strategy(), true, "distributed.strategy", "type: \"bucketed\"", &p);
  }
  if (d.backend() == DistributedConfig::NCCL && c.device() == "cpu") {
    p.Add("distributed.backend", "NCCL needs a CUDA device; use GLOO (or AUTO) on cpu");
  }
  if (d.backend() == DistributedConfig::SHM && c.device() != "cpu") {
    p.Add("distributed.backend", "SHM reduces CPU tensors; use NCCL (or AUTO) on cuda");
  }

  const CheckpointConfig& ck = c.checkpoint();
  p.Require(!ck.output_dir().empty(), "checkpoint.output_dir",
            "required: the directory for checkpoints and logs");
  p.Require(ck.every_n_steps() >= 0, "checkpoint.every_n_steps",
            absl::StrCat("must be >= 0 (0: only at the end), got ", ck.every_n_steps()));
  p.Require(ck.keep_last() >= 1, "checkpoint.keep_last",
            absl::StrCat("must be >= 1, got ", ck.keep_last()));
  p.Require(c.logging().every_n_steps() >= 1, "logging.every_n_steps",
            absl::StrCat("must be >= 1, got ", c.logging().every_n_steps()));
  p.Require(ValidDevice(c.device()), "device",
            absl::StrCat("must be \"cpu\", \"cuda\" or \"cuda:N\", got \"", c.device(), "\""));

  if (p.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("invalid config:\n  ", p.Joined()));
}

absl::Status ValidateSegmentationInferenceConfig(const SegmentationInferenceConfig& config,
                                                const std::string& field) {
  Problems p;
  CheckSegmentationInference(config, field, &p);
  if (p.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid segmentation inference options:\n  ", p.Joined()));
}

std::string ConfigToText(const TrainPipelineConfig& config) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetExpandAny(true);
  std::string text;
  printer.PrintToString(config, &text);
  return text;
}

std::string ConfigDifferences(const TrainPipelineConfig& a, const TrainPipelineConfig& b) {
  // MessageDifferencer unpacks Any payloads of known types: plugin options compare field by field.
  google::protobuf::util::MessageDifferencer differencer;
  std::string report;
  differencer.ReportDifferencesToString(&report);
  differencer.Compare(a, b);
  return report;
}

std::string ConfigFingerprint(const TrainPipelineConfig& config) {
  // FNV-1a, 64 bit: stable across platforms and builds, unlike std::hash.
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char ch : ConfigToText(config)) {
    hash ^= ch;
    hash *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", hash);
}

}  // namespace vision::core
