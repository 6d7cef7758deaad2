// DANet with SyncBatchNorm on two ranks (Gloo, two processes) equals DANet on one rank with the
// concatenated batch: the four outputs, the input gradients, every parameter's gradient (summed
// over ranks, as data parallelism does) and every running statistic. In double precision, so
// the stated tolerance (1e-9 relative to max(1, |expected|)) leaves room only for summation
// order, not for a statistic computed over the wrong batch.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "distributed/process_group/multiprocess_testing.h"
#include "distributed/process_group/process_group.h"
#include "distributed/sync_batchnorm/sync_batch_norm.h"
#include "gtest/gtest.h"
#include "models/backbones/resnet.pb.h"
#include "models/danet/danet.h"
#include "models/danet/danet.pb.h"

namespace vision::models::danet {
namespace {

constexpr double kTolerance = 1e-9;

absl::Status ExpectClose(const std::string& what, const at::Tensor& actual,
                         const at::Tensor& expected) {
  if (actual.sizes() != expected.sizes()) {
    return absl::InternalError(absl::StrCat(what, ": shapes differ"));
  }
  const double error = (actual - expected).abs().max().item<double>();
  const double scale = std::max(1.0, expected.abs().max().item<double>());
  if (error <= kTolerance * scale) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": max error ", error, " (scale ", scale, ")"));
}

absl::StatusOr<std::unique_ptr<DANet>> MakeModel() {
  DANetOptions options;
  options.set_num_classes(5);
  options.set_head_channels(32);
  options.set_aux(true);
  options.set_dropout(0);  // the two runs would draw different dropout masks
  options.mutable_backbone()->set_type("ResNet18");
  backbones::ResNetOptions resnet;
  resnet.set_output_stride(8);
  options.mutable_backbone()->mutable_options()->PackFrom(resnet);
  torch::manual_seed(7);  // the same initial weights in both models and on both ranks
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<DANet> model, DANet::Create(options));
  model->to(at::kDouble);
  // Non-zero gammas, so that the attention paths count.
  torch::NoGradGuard no_grad;
  model->named_parameters()["head.sa.gamma"].fill_(0.5);
  model->named_parameters()["head.sc.gamma"].fill_(0.3);
  return model;
}

std::vector<at::Tensor> Outputs(DANet& model, const at::Tensor& images) {
  const DANetOutput out = model.Forward(images, /*all_outputs=*/true);
  return {out.fused, out.position, out.channel, out.aux};
}

TEST(DANetSyncBatchNormTest, TwoRanksEqualOneRankOnTheConcatenatedBatch) {
  const int port = distributed::process_group::PickFreePort();
  const std::vector<absl::Status> statuses = distributed::process_group::RunRanks(
      2, absl::Seconds(120), [port](int rank) -> absl::Status {
        at::set_num_threads(1);
        torch::manual_seed(11);
        // Offset and scaled so that batch statistics are far from the initial running ones.
        const at::Tensor images = at::randn({4, 3, 32, 40}, at::kDouble) * 1.5 + 0.5;
        std::vector<at::Tensor> probes;
        for (int i = 0; i < 4; ++i) probes.push_back(at::randn({4, 5, 32, 40}, at::kDouble));

        // The reference: local BatchNorm over all four images.
        VISION_ASSIGN_OR_RETURN(std::unique_ptr<DANet> reference, MakeModel());
        reference->train();
        const at::Tensor full_input = images.clone().requires_grad_();
        const std::vector<at::Tensor> full = Outputs(*reference, full_input);
        at::Tensor full_loss = at::zeros({}, at::kDouble);
        for (size_t i = 0; i < full.size(); ++i) full_loss = full_loss + (full[i] * probes[i]).sum();
        full_loss.backward();

        // This rank's half, with statistics synchronised over both ranks.
        distributed::process_group::ProcessGroupOptions group_options;
        group_options.rank = rank;
        group_options.world_size = 2;
        group_options.master_port = port;
        group_options.timeout = std::chrono::seconds(60);
        VISION_ASSIGN_OR_RETURN(auto group,
                                distributed::process_group::CreateProcessGroup(group_options));
        VISION_ASSIGN_OR_RETURN(std::unique_ptr<DANet> model, MakeModel());
        VISION_ASSIGN_OR_RETURN(const int converted,
                                distributed::sync_batchnorm::ConvertSyncBatchNorm(*model, group));
        if (converted != 25) {  // ResNet-18's 20, the head's 4, the auxiliary head's 1
          return absl::InternalError(absl::StrCat("synchronised ", converted, " layers, not 25"));
        }
        model->train();
        const at::Tensor input = images.narrow(0, 2 * rank, 2).clone().requires_grad_();
        const std::vector<at::Tensor> half = Outputs(*model, input);
        // Sums, not means: the full loss is the sum of the ranks' losses.
        at::Tensor loss = at::zeros({}, at::kDouble);
        for (size_t i = 0; i < half.size(); ++i) {
          loss = loss + (half[i] * probes[i].narrow(0, 2 * rank, 2)).sum();
        }
        loss.backward();

        const std::string where = absl::StrCat(" (rank ", rank, ")");
        const char* names[] = {"fused", "position", "channel", "aux"};
        for (size_t i = 0; i < half.size(); ++i) {
          VISION_RETURN_IF_ERROR(ExpectClose(absl::StrCat(names[i], " output", where), half[i],
                                             full[i].narrow(0, 2 * rank, 2)));
        }
        VISION_RETURN_IF_ERROR(ExpectClose("input gradient" + where, input.grad(),
                                           full_input.grad().narrow(0, 2 * rank, 2)));
        // Parameter gradients are local: twice their mean over ranks is the full gradient.
        std::vector<at::Tensor> grads;
        std::vector<std::string> keys;
        for (const auto& item : model->named_parameters()) {
          keys.push_back(item.key());
          grads.push_back(item.value().grad().clone());
        }
        VISION_RETURN_IF_ERROR(distributed::process_group::AllReduceMean(*group, grads));
        const auto expected = reference->named_parameters();
        for (size_t i = 0; i < keys.size(); ++i) {
          VISION_RETURN_IF_ERROR(ExpectClose(absl::StrCat("gradient of ", keys[i], where),
                                             grads[i] * 2, expected[keys[i]].grad()));
        }
        const auto expected_buffers = reference->named_buffers();
        for (const auto& item : model->named_buffers()) {
          VISION_RETURN_IF_ERROR(ExpectClose(absl::StrCat(item.key(), where),
                                             item.value().to(at::kDouble),
                                             expected_buffers[item.key()].to(at::kDouble)));
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : statuses) EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace vision::models::danet
