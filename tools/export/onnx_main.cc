// Writes a trained model's inference graph as an ONNX file (DBNet's maps, DANet's logits, Mask
// R-CNN's detections and masks), checked against this project's own model:
//   bazel run //tools/export:onnx -- --config=models/dbnet/configs/icdar2015_resnet18.pbtxt
//       --checkpoint=runs/dbnet/best.pt --output=$PWD/dbnet.onnx
// LibTorch's C++ modules have no ONNX exporter, so the graph is traced in Python: this driver
// loads the checkpoint into the config's model (the EMA weights by default, as //tools/export),
// runs it in eval mode on seeded random images of two sizes (Mask R-CNN: a padded batch of two
// images of different sizes, then one image), and writes a bundle (spec.json:
// the architecture; weights.pth: the state dict in this project's keys; reference.pth: the
// images and our outputs) to a temporary directory; tools/export/onnx_export.py rebuilds the
// network in PyTorch from the bundle, loads the weights strictly, exports it with
// torch.onnx.export and writes the file only when onnxruntime's outputs on those images equal
// ours. --bundle_dir keeps the bundle (the Python step can then be rerun by hand).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "core/torch_guard.h"
#include "models/backbones/resnet.h"
#include "models/backbones/torch_save_writer.h"
#include "models/danet/danet.h"
#include "models/dbnet/dbnet.h"
#include "models/mask_rcnn/anchor_generator.h"
#include "models/mask_rcnn/mask_rcnn.h"
#include "models/mask_rcnn/roi_heads.h"
#include "models/ops/boxes.h"
#include "models/ops/paste_masks.h"
#include "tools/export/export.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Path of the pipeline config the checkpoint was trained with.");
ABSL_FLAG(std::string, checkpoint, "", "Checkpoint to export (checkpoint_N.pt or best.pt).");
ABSL_FLAG(std::string, output, "", "The .onnx file to write (replaced if it exists).");
ABSL_FLAG(std::string, weights, "",
          "ema or model: which weights to export. Default: the EMA weights when the checkpoint "
          "holds them, else the live ones.");
ABSL_FLAG(std::string, size, "640x640",
          "HxW of the example image the graph is traced with (and the only size with "
          "--fixed_size); DBNet needs multiples of 32. Mask R-CNN: a batch of two images, the "
          "second smaller (padded), each side above 64 so that every pyramid level is at least "
          "2x2 (the graph then runs on smaller images too).");
ABSL_FLAG(std::string, check_size, "",
          "HxW of a second image onnxruntime must also match ours on (dynamic sizes only). "
          "Default: --size plus 32 rows and 64 columns.");
ABSL_FLAG(bool, fixed_size, false,
          "Export for --size only (default: height and width are dynamic).");
ABSL_FLAG(double, tolerance, 1e-4,
          "Largest max |onnxruntime - ours| / max(1, max |ours|) accepted (DBNet's binary map: "
          "k / 4 times it). Deep networks amplify float32 noise: compare with the 'PyTorch "
          "eager vs ours' difference the export prints.");
ABSL_FLAG(double, min_matched, 1.0,
          "Mask R-CNN: the share of our detections, and of onnxruntime's, that must be matched "
          "(same image and label, IoU > 0.99) for the file to be written.");
ABSL_FLAG(std::string, bundle_dir, "",
          "Keep the intermediate bundle (spec.json, weights.pth, reference.pth) here instead "
          "of in a temporary directory.");
ABSL_FLAG(std::string, python, "",
          "Python with torch, onnx, onnxruntime and onnxscript (tools/python_requirements.txt); "
          "bazel run sets it to the project's venv.");
ABSL_FLAG(std::string, script, "", "tools/export/onnx_export.py; bazel run sets it.");

namespace vision::tools {
namespace {

namespace fs = std::filesystem;

// bazel run starts in the runfiles tree, where --python and --script (BUILD args) are relative
// paths; RunDriver then changes to the workspace.
fs::path& StartDirectory() {
  static fs::path* dir = new fs::path(fs::current_path());
  return *dir;
}

std::string FromStart(const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (StartDirectory() / path).string();
}

absl::StatusOr<std::pair<int64_t, int64_t>> ParseSize(const std::string& flag,
                                                      const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, 'x');
  int64_t h = 0, w = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &h) || !absl::SimpleAtoi(parts[1], &w) ||
      h < 32 || w < 32) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "='", text, "': give HEIGHTxWIDTH, each at least 32 (e.g. 640x640)"));
  }
  return std::pair{h, w};
}

std::string JsonList(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

std::string JsonBools(const std::vector<bool>& v) {
  std::vector<std::string> s;
  for (bool b : v) s.push_back(b ? "true" : "false");
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// Exactly: the Python side casts to float32 where our C++ compares in float.
std::string JsonDouble(double v) { return absl::StrFormat("%.17g", v); }

// A float tensor of any rank as nested JSON lists.
std::string JsonTensor(const at::Tensor& t) {
  if (t.dim() == 0) return JsonDouble(t.item<double>());
  std::vector<std::string> items;
  for (int64_t i = 0; i < t.size(0); ++i) items.push_back(JsonTensor(t[i]));
  return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
}

// What Mask R-CNN's inference does beyond its weights: anchors, proposal and detection
// selection, the RoI pooling sizes and the mask threshold.
std::string MaskRcnnSpec(const models::mask_rcnn::MaskRcnnConfig& c) {
  const models::mask_rcnn::AnchorGenerator anchors(c.rpn.anchors());
  std::vector<std::string> cells;
  for (int64_t l = 0; l < anchors.NumLevels(); ++l) {
    cells.push_back(JsonTensor(anchors.CellAnchors(l)));
  }
  const double clip = models::ops::BoxCoderOptions().bbox_xform_clip();
  const models::mask_rcnn::RoiHeadsOptions& h = c.roi_heads;
  return absl::StrCat(
      ", \"fpn_channels\": ", c.fpn_channels,
      ", \"mask_threshold\": ", JsonDouble(c.mask_threshold), ", \"rpn\": {\"cell_anchors\": [",
      absl::StrJoin(cells, ", "), "], \"pre_nms_top_n\": ", c.rpn.pre_nms_top_n_test(),
      ", \"post_nms_top_n\": ", c.rpn.post_nms_top_n_test(),
      ", \"nms_threshold\": ", JsonDouble(c.rpn.nms_threshold()),
      ", \"score_threshold\": ", JsonDouble(c.rpn.score_threshold()),
      ", \"min_size\": ", JsonDouble(c.rpn.min_size()), ", \"bbox_xform_clip\": ", JsonDouble(clip),
      "}, \"roi_heads\": {\"num_classes\": ", h.num_classes(),
      ", \"representation_size\": ", h.representation_size(),
      ", \"mask_head_channels\": ", JsonList(h.mask_head_channels()),
      ", \"box_roi_size\": ", h.box_roi_size(), ", \"mask_roi_size\": ", h.mask_roi_size(),
      ", \"sampling_ratio\": ", h.sampling_ratio(),
      ", \"score_threshold\": ", JsonDouble(h.score_threshold()),
      ", \"nms_threshold\": ", JsonDouble(h.nms_threshold()),
      ", \"detections_per_image\": ", h.detections_per_image(),
      ", \"min_size\": ", JsonDouble(models::mask_rcnn::kMinDetectionSize),
      ", \"bbox_xform_clip\": ", JsonDouble(clip), "}");
}

// Runs argv[0] with `argv` (no shell) and returns its exit status (128 + signal if killed).
absl::StatusOr<int> RunProgram(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", std::strerror(errno)));
  if (pid == 0) {
    execv(args[0], args.data());
    std::fprintf(stderr, "error: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid failed: ", std::strerror(errno)));
    }
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The architecture onnx_export.py rebuilds: what the weights alone do not say (dilations,
// multi-grid, k, Mask R-CNN's inference options) and the sizes it needs to build the modules.
absl::StatusOr<std::string> Spec(const std::string& config_name, const std::string& model_type,
                                 core::Model& model) {
  auto* dbnet = dynamic_cast<models::dbnet::DBNet*>(&model);
  auto* danet = dynamic_cast<models::danet::DANet*>(&model);
  auto* mask_rcnn = dynamic_cast<models::mask_rcnn::MaskRCNN*>(&model);
  if (dbnet == nullptr && danet == nullptr && mask_rcnn == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX export: model '", model_type, "' (config '", config_name,
                     "') is not supported; supported: DANet, DBNet, MaskRCNN"));
  }
  // DBNet's and DANet's "backbone", Mask R-CNN's "backbone.body".
  std::shared_ptr<models::backbones::ResNet> resnet;
  for (const auto& item : model.named_modules()) {
    if (item.key() == "backbone" || item.key() == "backbone.body") {
      if (auto r = std::dynamic_pointer_cast<models::backbones::ResNet>(item.value())) resnet = r;
    }
  }
  if (!resnet) {
    return absl::UnimplementedError(
        absl::StrCat("ONNX export: the backbone of '", config_name,
                     "' is not a ResNet, the only backbone onnx_export.py can rebuild"));
  }
  const models::backbones::ResNetConfig& rc = resnet->config();
  const std::string backbone = absl::StrCat(
      "{\"type\": \"ResNet\", \"depth\": ", rc.depth(),
      ", \"output_stride\": ", rc.output_stride(), ", \"multi_grid\": ", JsonList(rc.multi_grid()),
      ", \"stage_with_dcn\": ", JsonBools(rc.stage_with_dcn()),
      ", \"frozen_batchnorm\": ", rc.frozen_batchnorm() ? "true" : "false",
      ", \"out_channels\": ", JsonList(resnet->OutChannels()), "}");
  if (mask_rcnn != nullptr) {
    if (!mask_rcnn->config().roi_heads.masks()) {
      return absl::UnimplementedError(
          absl::StrCat("ONNX export: the Mask R-CNN of '", config_name, "' has no mask branch"));
    }
    return absl::StrCat("{\"model\": \"MaskRCNN\", \"backbone\": ", backbone,
                        MaskRcnnSpec(mask_rcnn->config()), "}\n");
  }
  if (dbnet != nullptr) {
    return absl::StrCat("{\"model\": \"DBNet\", \"backbone\": ", backbone,
                        ", \"inner_channels\": ", dbnet->config().inner_channels,
                        ", \"k\": ", dbnet->config().k, "}\n");
  }
  const models::danet::DANetConfig& c = danet->config();
  const int64_t head = c.head_channels > 0 ? c.head_channels : resnet->OutChannels().back() / 4;
  return absl::StrCat("{\"model\": \"DANet\", \"backbone\": ", backbone,
                      ", \"num_classes\": ", c.num_classes, ", \"head_channels\": ", head,
                      ", \"attention_reduction\": ", c.attention_reduction,
                      ", \"aux\": ", c.aux ? "true" : "false", "}\n");
}

// Mask R-CNN's Detect on a padded batch, and Predict's paste of each detection's mask at its
// image's size (threshold included), padded to the batch's: "<case>/image_sizes" [N, 2] and the
// detections of all images, image by image, best first: "<case>/boxes" [D, 4], "scores" [D],
// "labels" [D] (1..K), "batch_index" [D], "mask_probs" [D, 1, M, M], "masks" [D, H, W] bool.
void MaskRcnnReference(models::mask_rcnn::MaskRCNN& model, const std::string& c,
                       const at::Tensor& images,
                       const std::vector<std::pair<int64_t, int64_t>>& sizes,
                       models::backbones::StateDict& out) {
  const std::vector<models::mask_rcnn::Detections> detections = model.Detect(images, sizes);
  std::vector<at::Tensor> boxes, scores, labels, batch_index, mask_probs, masks;
  for (size_t i = 0; i < detections.size(); ++i) {
    const models::mask_rcnn::Detections& d = detections[i];
    const auto [height, width] = sizes[i];
    const at::Tensor pasted =
        models::ops::PasteMasks(
            d.mask_probs, d.boxes,
            models::ops::PasteMasksOptions(height, width).threshold(model.config().mask_threshold))
            .squeeze(1);
    masks.push_back(
        at::constant_pad_nd(pasted, {0, images.size(3) - width, 0, images.size(2) - height}));
    boxes.push_back(d.boxes);
    scores.push_back(d.scores);
    labels.push_back(d.labels);
    batch_index.push_back(at::full({d.boxes.size(0)}, static_cast<int64_t>(i), at::kLong));
    mask_probs.push_back(d.mask_probs);
  }
  std::vector<int64_t> flat_sizes;
  for (const auto& [h, w] : sizes) flat_sizes.insert(flat_sizes.end(), {h, w});
  out.emplace_back(c + "/image_sizes",
                   at::tensor(flat_sizes, at::kLong).view({static_cast<int64_t>(sizes.size()), 2}));
  out.emplace_back(c + "/boxes", at::cat(boxes));
  out.emplace_back(c + "/scores", at::cat(scores));
  out.emplace_back(c + "/labels", at::cat(labels));
  out.emplace_back(c + "/batch_index", at::cat(batch_index));
  out.emplace_back(c + "/mask_probs", at::cat(mask_probs));
  out.emplace_back(c + "/masks", at::cat(masks));
}

// Our outputs on seeded images: "<case>/images" and "<case>/<output>" per size.
models::backbones::StateDict ReferenceOutputs(
    core::Model& model, const std::vector<std::pair<int64_t, int64_t>>& sizes) {
  torch::NoGradGuard no_grad;
  model.eval();
  torch::manual_seed(0);
  models::backbones::StateDict out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string c = absl::StrCat("case", i);
    const auto [height, width] = sizes[i];
    if (auto* mask_rcnn = dynamic_cast<models::mask_rcnn::MaskRCNN*>(&model)) {
      // The first case a batch of two, the second image smaller and zero-padded as the loader
      // collates it; the graph is traced on it.
      std::vector<std::pair<int64_t, int64_t>> image_sizes = {sizes[i]};
      at::Tensor images = torch::randn({i == 0 ? 2 : 1, 3, height, width});
      if (i == 0) {
        image_sizes.emplace_back(height - height / 4, width - width / 8);
        images[1].slice(1, image_sizes[1].first).zero_();
        images[1].slice(2, image_sizes[1].second).zero_();
      }
      out.emplace_back(c + "/images", images);
      MaskRcnnReference(*mask_rcnn, c, images, image_sizes, out);
      continue;
    }
    const at::Tensor images = torch::randn({1, 3, height, width});
    out.emplace_back(c + "/images", images);
    if (auto* dbnet = dynamic_cast<models::dbnet::DBNet*>(&model)) {
      const models::dbnet::DBHeadOutput maps = dbnet->Forward(images, /*with_threshold=*/true);
      out.emplace_back(c + "/probability", maps.probability);
      out.emplace_back(c + "/threshold", maps.threshold);
      out.emplace_back(c + "/binary", maps.binary);
    } else if (auto* danet = dynamic_cast<models::danet::DANet*>(&model)) {
      out.emplace_back(c + "/logits", danet->SegmentationLogits(images));
    }
  }
  return out;
}

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string config_path = absl::GetFlag(FLAGS_config);
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint);
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string weights = absl::GetFlag(FLAGS_weights);
  const std::string python = FromStart(absl::GetFlag(FLAGS_python));
  const std::string script = FromStart(absl::GetFlag(FLAGS_script));
  for (const auto& [flag, value] : {std::pair{"--config", config_path},
                                    {"--checkpoint", checkpoint},
                                    {"--output", output},
                                    {"--python", python},
                                    {"--script", script}}) {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is required"));
  }
  export_tool::WeightsChoice choice = export_tool::WeightsChoice::kDefault;
  if (weights == "ema") {
    choice = export_tool::WeightsChoice::kEma;
  } else if (weights == "model") {
    choice = export_tool::WeightsChoice::kModel;
  } else if (!weights.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weights='", weights, "': give ema or model (or leave it out)"));
  }
  VISION_ASSIGN_OR_RETURN(const auto size, ParseSize("--size", absl::GetFlag(FLAGS_size)));
  std::vector<std::pair<int64_t, int64_t>> sizes = {size};
  if (!absl::GetFlag(FLAGS_fixed_size)) {
    const std::string check = absl::GetFlag(FLAGS_check_size);
    if (check.empty()) {
      sizes.emplace_back(size.first + 32, size.second + 64);
    } else {
      VISION_ASSIGN_OR_RETURN(const auto second, ParseSize("--check_size", check));
      sizes.push_back(second);
    }
  }
  const fs::path parent = fs::path(output).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--output='", output, "': '", parent.string(),
                     "' is not a directory; create it or name a file in an existing one"));
  }
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(config_path, overrides));
  const std::string model_type = config.model().type();
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> model, core::BuildModel(config.model()));
  VISION_ASSIGN_OR_RETURN(const std::string spec, Spec(config_path, model_type, *model));
  VISION_ASSIGN_OR_RETURN(
      const export_tool::CheckpointWeights loaded,
      export_tool::LoadCheckpointWeights(checkpoint, *model, model_type, choice));
  VISION_ASSIGN_OR_RETURN(const models::backbones::StateDict reference,
                          core::GuardTorch("ONNX export: running the model",
                                           [&]() -> absl::StatusOr<models::backbones::StateDict> {
                                             return ReferenceOutputs(*model, sizes);
                                           }));

  std::string bundle = absl::GetFlag(FLAGS_bundle_dir);
  const bool temporary = bundle.empty();
  if (temporary) {
    std::string pattern = (fs::temp_directory_path() / "onnx_export.XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a directory like ", pattern));
    }
    bundle = pattern;
  } else if (!fs::create_directories(bundle, ec) && ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--bundle_dir='", bundle, "': cannot create it: ", ec.message()));
  }
  absl::Status status = [&]() -> absl::Status {
    {
      std::ofstream f(fs::path(bundle) / "spec.json");
      f << spec;
      if (!f) return absl::InternalError(absl::StrCat("cannot write ", bundle, "/spec.json"));
    }
    VISION_RETURN_IF_ERROR(models::backbones::WriteTorchStateDict(
        export_tool::ModuleStateDict(*model), (fs::path(bundle) / "weights.pth").string()));
    VISION_RETURN_IF_ERROR(models::backbones::WriteTorchStateDict(
        reference, (fs::path(bundle) / "reference.pth").string()));
    std::printf("loaded the %s weights of %s (step %lld); bundle in %s\n",
                loaded.ema ? "EMA" : "live", checkpoint.c_str(),
                static_cast<long long>(loaded.step), bundle.c_str());
    std::fflush(stdout);
    std::vector<std::string> argv = {python, script, absl::StrCat("--bundle=", bundle),
                                     absl::StrCat("--output=", fs::absolute(output).string())};
    argv.push_back(absl::StrCat("--tolerance=", absl::GetFlag(FLAGS_tolerance)));
    argv.push_back(absl::StrCat("--min_matched=", absl::GetFlag(FLAGS_min_matched)));
    if (absl::GetFlag(FLAGS_fixed_size)) argv.push_back("--fixed_size");
    VISION_ASSIGN_OR_RETURN(const int rc, RunProgram(argv));
    if (rc != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("ONNX export of '", config_path, "' failed (", script, " exit status ", rc,
                       "; its message is above); nothing written"));
    }
    return absl::OkStatus();
  }();
  if (temporary) {
    // Not fs::remove_all: libtorch.so exports its own, ABI-incompatible copy, which the dynamic
    // linker picks and which crashes here.
    for (const char* name : {"spec.json", "weights.pth", "reference.pth"}) {
      ::unlink((fs::path(bundle) / name).c_str());
    }
    ::rmdir(bundle.c_str());
  }
  return status;
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  vision::tools::StartDirectory();
  return vision::tools::RunDriver(
      argc, argv,
      "Exports a DBNet's, DANet's or Mask R-CNN's inference graph as ONNX, checked with "
      "onnxruntime against this project's model: onnx --config=FILE --checkpoint=FILE "
      "--output=FILE.onnx [--size=HxW] [--check_size=HxW] [--fixed_size] [--tolerance=X] "
      "[--min_matched=X] [--weights=ema|model] [--bundle_dir=DIR] [--override='TEXT' ...]",
      vision::tools::Run);
}
