// Mask R-CNN against torchvision 0.26 on the same weights and inputs (the reference is written
// by testdata/make_mask_rcnn_parity.py; see mask_rcnn_parity_test.sh): inference detections
// and pasted masks, and the five training losses and the gradients of named parameters with
// sampling made deterministic. Both sides compute in float64, where rounding noise is far
// below every tolerance, so a difference is an implementation difference.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/run_length_mask.h"
#include "models/backbones/torchvision_import.h"
#include "models/mask_rcnn/mask_rcnn.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::mask_rcnn {
namespace {

using ops::MaxDiff;

constexpr int64_t kBig = 100000;

class MaskRcnnParityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* dir = std::getenv("MASK_RCNN_PARITY_DIR");
    ASSERT_NE(dir, nullptr) << "run through mask_rcnn_parity_test.sh";
    auto weights = backbones::ReadTorchStateDict(std::string(dir) + "/weights.pt");
    ASSERT_TRUE(weights.ok()) << weights.status();
    auto case_dict = backbones::ReadTorchStateDict(std::string(dir) + "/case.pt");
    ASSERT_TRUE(case_dict.ok()) << case_dict.status();
    case_ = new std::map<std::string, at::Tensor>(case_dict->begin(), case_dict->end());

    MaskRCNNOptions options;
    options.set_num_classes(3);
    *options.mutable_backbone() = TorchvisionBackbone();
    auto* rpn = options.mutable_rpn();
    rpn->set_pre_nms_top_n_train(kBig);
    rpn->set_pre_nms_top_n_test(kBig);
    rpn->set_post_nms_top_n_train(kBig);
    rpn->set_post_nms_top_n_test(kBig);
    rpn->set_batch_size_per_image(kBig);
    options.mutable_roi_heads()->set_batch_size_per_image(kBig);
    auto model = MaskRCNN::Create(options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    auto report = ImportTorchvisionMaskRcnn(*weights, *model_, /*strict=*/true, "reference");
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->complete()) << report->ToString();
    EXPECT_TRUE(report->added.empty()) << report->ToString();
    // The reference computes in float64 (see make_mask_rcnn_parity.py): so do we.
    model_->to(at::kDouble);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete case_;
  }

  static const at::Tensor& Get(const std::string& key) {
    auto it = case_->find(key);
    EXPECT_NE(it, case_->end()) << key;
    return it->second;
  }
  static std::vector<std::pair<int64_t, int64_t>> Sizes() {
    const at::Tensor s = Get("image_sizes");
    return {{s[0][0].item<int64_t>(), s[0][1].item<int64_t>()},
            {s[1][0].item<int64_t>(), s[1][1].item<int64_t>()}};
  }

  static MaskRCNN* model_;
  static std::map<std::string, at::Tensor>* case_;
};

MaskRCNN* MaskRcnnParityTest::model_ = nullptr;
std::map<std::string, at::Tensor>* MaskRcnnParityTest::case_ = nullptr;

double MaxAbs(const at::Tensor& t) { return t.numel() == 0 ? 0.0 : t.abs().max().item<double>(); }

// Detections are compared as sets: both sides sort by score, and scores closer than the
// numerical noise of a ResNet-50 (about 1e-6 here) may come in either order. Every reference
// detection must have a counterpart with the same label, box within 1e-3 px and score within
// 1e-4, except at the 100-detection cut where one side may keep an almost-tied other box.
TEST_F(MaskRcnnParityTest, InferenceMatchesTorchvision) {
  model_->eval();
  torch::NoGradGuard no_grad;
  const std::vector<Detections> ours = model_->Detect(Get("images"), Sizes());
  ASSERT_EQ(ours.size(), 2u);
  core::Batch batch;
  batch.images = Get("images");
  batch.image_sizes = Get("image_sizes");
  for (int i = 0; i < 2; ++i) {
    core::Sample sample;
    sample.id = "image" + std::to_string(i);
    sample.original_height = static_cast<int>(Sizes()[i].first);
    sample.original_width = static_cast<int>(Sizes()[i].second);
    batch.samples.push_back(sample);
  }
  const std::vector<core::Sample> predictions = model_->Predict(batch);

  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("image " + std::to_string(i));
    const at::Tensor ref_boxes = Get("det_boxes_" + std::to_string(i));
    const at::Tensor ref_scores = Get("det_scores_" + std::to_string(i));
    const at::Tensor ref_labels = Get("det_labels_" + std::to_string(i));
    const at::Tensor ref_probs = Get("det_mask_probs_" + std::to_string(i));
    const at::Tensor ref_masks = Get("det_masks_" + std::to_string(i));
    const Detections& d = ours[i];
    ASSERT_EQ(d.boxes.size(0), ref_boxes.size(0));
    ASSERT_EQ(predictions[i].objects.size(), static_cast<size_t>(d.boxes.size(0)));
    const double cut_score = ref_scores[-1].item<double>();
    int matched = 0, at_cut = 0;
    double worst_box = 0, worst_score = 0, worst_prob = 0, worst_iou = 1;
    for (int64_t r = 0; r < ref_boxes.size(0); ++r) {
      const at::Tensor diff = (d.boxes - ref_boxes[r]).abs().amax(1);
      const at::Tensor same_label = d.labels == ref_labels[r];
      const at::Tensor candidates = at::where(same_label, diff, at::full_like(diff, 1e9));
      const int64_t k = candidates.argmin().item<int64_t>();
      if (candidates[k].item<double>() > 1e-3) {
        EXPECT_LT(ref_scores[r].item<double>() - cut_score, 1e-4)
            << "reference detection " << r << " (score " << ref_scores[r].item<double>()
            << ") has no counterpart";
        ++at_cut;
        continue;
      }
      ++matched;
      worst_box = std::max(worst_box, candidates[k].item<double>());
      worst_score = std::max(worst_score,
                             std::abs(d.scores[k].item<double>() - ref_scores[r].item<double>()));
      worst_prob = std::max(worst_prob, MaxDiff(d.mask_probs[k], ref_probs[r]));
      EXPECT_NEAR(d.scores[k].item<double>(), ref_scores[r].item<double>(), 1e-4) << r;
      EXPECT_LT(MaxDiff(d.mask_probs[k], ref_probs[r]), 1e-4) << r;
      // Pasted at the original size: IoU of our RLE with torchvision's mask > 0.5.
      const core::RunLengthMask& rle = predictions[i].objects[static_cast<size_t>(k)].rle;
      auto decoded = core::DecodeRle(rle);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      const at::Tensor mine =
          at::from_blob(decoded->data, {decoded->rows, decoded->cols}, at::kByte).ne(0);
      const at::Tensor theirs = ref_masks[r].ne(0);
      const double inter = (mine & theirs).sum().item<double>();
      const double uni = (mine | theirs).sum().item<double>();
      worst_iou = std::min(worst_iou, uni == 0 ? 1.0 : inter / uni);
      EXPECT_GE(uni == 0 ? 1.0 : inter / uni, 0.99) << "mask of detection " << r;
      EXPECT_EQ(predictions[i].objects[static_cast<size_t>(k)].label,
                ref_labels[r].item<int64_t>() - 1);
    }
    std::cout << "image " << i << ": " << matched << " of " << ref_boxes.size(0)
              << " detections matched; largest differences: box " << worst_box << " px, score "
              << worst_score << ", mask probability " << worst_prob << "; smallest mask IoU "
              << worst_iou << "\n";
    EXPECT_LE(at_cut, 2);
    EXPECT_GE(matched, ref_boxes.size(0) - 2);
  }
}

TEST_F(MaskRcnnParityTest, TrainingLossesAndGradientsMatchTorchvision) {
  model_->train();
  model_->zero_grad();
  std::vector<InstanceTargets> targets(2);
  for (int i = 0; i < 2; ++i) {
    targets[i].boxes = Get("gt_boxes_" + std::to_string(i));
    targets[i].labels = Get("gt_labels_" + std::to_string(i));
    targets[i].masks = Get("gt_masks_" + std::to_string(i));
  }
  const std::map<std::string, at::Tensor> losses =
      model_->LossesFor(Get("images"), Sizes(), targets);
  ASSERT_EQ(losses.size(), 5u);
  at::Tensor total = at::zeros({});
  for (const char* name :
       {"loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg", "loss_mask"}) {
    auto it = losses.find(name);
    ASSERT_NE(it, losses.end()) << name;
    const double want = Get(name).item<double>();
    std::cout << name << ": " << it->second.item<double>() << " (torchvision " << want << ")\n";
    EXPECT_NEAR(it->second.item<double>(), want, 1e-4 * std::max(1.0, std::abs(want))) << name;
    total = total + it->second;
  }
  total.backward();
  std::map<std::string, at::Tensor> params;
  for (const auto& item : model_->named_parameters()) params[item.key()] = item.value();
  for (const auto& [key, grad] : *case_) {
    if (key.rfind("grad/", 0) != 0) continue;
    const std::string name = FromTorchvisionKey(key.substr(5));
    auto it = params.find(name);
    ASSERT_NE(it, params.end()) << name;
    ASSERT_TRUE(it->second.grad().defined()) << name;
    const double scale = std::max(1e-3, MaxAbs(grad));
    std::cout << "gradient of " << name << ": largest difference / largest value "
              << MaxDiff(it->second.grad(), grad) / scale << "\n";
    EXPECT_LT(MaxDiff(it->second.grad(), grad) / scale, 1e-4)
        << name << " (max |grad| " << scale << ")";
  }
}

}  // namespace
}  // namespace vision::models::mask_rcnn
