#include "models/testing/device_parity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "engine/autocast.h"
#include "engine/loss_scaler.h"
#include "engine/memory_format.h"

namespace vision::models::testing {
namespace {

std::map<std::string, at::Tensor> StateOf(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& item : module.named_parameters()) state[item.key()] = item.value();
  for (const auto& item : module.named_buffers()) state[item.key()] = item.value();
  return state;
}

at::Tensor Convert(const at::Tensor& t, const c10::Device& device, at::ScalarType float_type) {
  if (!t.defined()) return t;
  return t.is_floating_point() ? t.to(device, float_type) : t.to(device);
}

std::vector<int64_t> Unravel(int64_t flat, at::IntArrayRef sizes) {
  std::vector<int64_t> index(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    index[d] = sizes[d] == 0 ? 0 : flat % sizes[d];
    flat = sizes[d] == 0 ? 0 : flat / sizes[d];
  }
  return index;
}

std::string IndexString(const std::vector<int64_t>& index) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < index.size(); ++i) out << (i ? ", " : "") << index[i];
  out << "]";
  return out.str();
}

std::string Number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.7g", v);
  return text;
}

constexpr double kInfinity = std::numeric_limits<double>::infinity();

double Ratio(double difference, double scale) {
  return difference == 0 ? 0 : scale > 0 ? difference / scale : kInfinity;
}

EntryDifference Compare(const std::string& name, const at::Tensor& expected_in,
                        const at::Tensor& seen_in, double floor) {
  EntryDifference d;
  d.name = name;
  const at::Tensor expected = expected_in.detach().to(at::kCPU, at::kDouble);
  const at::Tensor seen = seen_in.detach().to(at::kCPU, at::kDouble);
  if (expected.sizes() != seen.sizes()) {
    std::ostringstream problem;
    problem << "shape " << seen.sizes() << ", expected " << expected.sizes();
    d.problem = problem.str();
    d.relative_max = d.relative_rms = kInfinity;
    return d;
  }
  d.numel = expected.numel();
  if (d.numel == 0) return d;
  const at::Tensor finite = at::isfinite(seen);
  if (!finite.all().item<bool>()) {
    const int64_t first = (~finite).flatten().nonzero()[0][0].item<int64_t>();
    d.where = Unravel(first, seen.sizes());
    d.expected = expected.flatten()[first].item<double>();
    d.seen = seen.flatten()[first].item<double>();
    d.problem = "non-finite values";
    d.relative_max = d.relative_rms = kInfinity;
    return d;
  }
  const at::Tensor difference = (seen - expected).flatten();
  const at::Tensor magnitude = difference.abs();
  const int64_t worst = magnitude.argmax().item<int64_t>();
  d.max_abs_difference = magnitude[worst].item<double>();
  d.where = Unravel(worst, seen.sizes());
  d.expected = expected.flatten()[worst].item<double>();
  d.seen = seen.flatten()[worst].item<double>();
  d.max_scale = std::max(expected.abs().max().item<double>(), floor);
  d.relative_max = Ratio(d.max_abs_difference, d.max_scale);
  d.rms_difference = difference.square().mean().sqrt().item<double>();
  d.rms_scale = std::max(expected.square().mean().sqrt().item<double>(), floor);
  d.relative_rms = Ratio(d.rms_difference, d.rms_scale);
  return d;
}

// How far past its tolerance an entry is (> 1: outside).
double Excess(const EntryDifference& e, const Tolerance& tolerance) {
  if (!e.problem.empty()) return kInfinity;
  return std::max(e.relative_max / tolerance.max, e.relative_rms / tolerance.rms);
}

}  // namespace

void UseIeeeFloat32OnCuda() {
  at::Context& context = at::globalContext();
  context.setAllowTF32CuDNN(false);
  context.setAllowTF32CuBLAS(false);
  context.setBenchmarkCuDNN(false);
  context.setDeterministicCuDNN(true);
  for (const auto& [op, name] : {std::pair{at::Float32Op::CONV, "cuDNN convolutions"},
                                 std::pair{at::Float32Op::MATMUL, "cuBLAS matrix products"}}) {
    const at::Float32Precision precision = context.float32Precision(at::Float32Backend::CUDA, op);
    EXPECT_NE(precision, at::Float32Precision::TF32)
        << name << " still compute float32 in TF32 (" << at::precision2str(precision) << ")";
  }
  EXPECT_FALSE(context.allowTF32CuBLAS());
  EXPECT_TRUE(context.deterministicCuDNN());
  EXPECT_FALSE(context.benchmarkCuDNN());
}

::testing::AssertionResult CopyState(const torch::nn::Module& from, torch::nn::Module& to) {
  const std::map<std::string, at::Tensor> source = StateOf(from);
  const std::map<std::string, at::Tensor> target = StateOf(to);
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : target) {
    auto it = source.find(name);
    if (it == source.end()) {
      return ::testing::AssertionFailure() << "the source has no '" << name << "'";
    }
    if (it->second.sizes() != tensor.sizes()) {
      return ::testing::AssertionFailure()
             << "'" << name << "' has shape " << it->second.sizes() << " in the source, "
             << tensor.sizes() << " in the copy";
    }
    at::Tensor destination = tensor;
    destination.copy_(it->second);
  }
  return ::testing::AssertionSuccess();
}

core::Batch BatchOn(const core::Batch& batch, const c10::Device& device,
                    at::ScalarType float_type) {
  core::Batch out;
  out.images = Convert(batch.images, device, float_type);
  out.image_sizes = batch.image_sizes.defined() ? batch.image_sizes.clone() : at::Tensor();
  for (const auto& [name, tensor] : batch.targets) {
    out.targets[name] = Convert(tensor, device, float_type);
  }
  for (const auto& image : batch.instances) {
    std::map<std::string, at::Tensor> converted;
    for (const auto& [name, tensor] : image) converted[name] = Convert(tensor, device, float_type);
    out.instances.push_back(std::move(converted));
  }
  out.samples = batch.samples;
  return out;
}

::testing::AssertionResult ToChannelsLast(torch::nn::Module& model, core::Batch* batch) {
  const int converted = engine::ToChannelsLast(model);
  if (converted == 0) {
    return ::testing::AssertionFailure() << "the model has no 4-D tensor to make channels-last";
  }
  batch->images = engine::ImagesToChannelsLast(batch->images);
  if (!batch->images.is_contiguous(at::MemoryFormat::ChannelsLast) ||
      batch->images.is_contiguous()) {
    return ::testing::AssertionFailure()
           << "the images " << batch->images.sizes() << " are not strictly channels-last";
  }
  std::cout << "channels-last: " << converted << " weight and buffer tensors converted\n";
  return ::testing::AssertionSuccess();
}

StepResult LossesAndGradients(core::Model& model, const core::Batch& batch) {
  return GradientsOf(model, [&] { return model.Losses(batch); });
}

StepResult GradientsOf(torch::nn::Module& model,
                       const std::function<std::map<std::string, at::Tensor>()>& losses) {
  model.train();
  model.zero_grad();
  StepResult result;
  at::Tensor total;
  for (const auto& [name, loss] : losses()) {
    result.losses[name] = loss.detach().to(at::kCPU, at::kDouble);
    result.loss_types[name] = loss.scalar_type();
    total = total.defined() ? total + loss : loss;
  }
  total.backward();
  for (const auto& item : model.named_parameters()) {
    const at::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (p.grad().defined()) {
      result.gradients[item.key()] = p.grad().detach().to(at::kCPU, at::kDouble);
    } else {
      result.without_gradient.push_back(item.key());
    }
  }
  return result;
}

Comparison::Comparison(const std::map<std::string, at::Tensor>& expected,
                       const std::map<std::string, at::Tensor>& seen, double floor) {
  std::set<std::string> names;
  for (const auto& [name, t] : expected) names.insert(name);
  for (const auto& [name, t] : seen) names.insert(name);
  for (const std::string& name : names) {
    auto e = expected.find(name);
    auto s = seen.find(name);
    if (e == expected.end() || s == seen.end()) {
      EntryDifference d;
      d.name = name;
      d.relative_max = d.relative_rms = kInfinity;
      d.problem = e == expected.end() ? "not expected" : "missing";
      entries_.push_back(d);
      continue;
    }
    entries_.push_back(Compare(name, e->second, s->second, floor));
  }
}

std::string Comparison::Summary() const {
  const EntryDifference* by_max = nullptr;
  const EntryDifference* by_rms = nullptr;
  for (const EntryDifference& e : entries_) {
    if (by_max == nullptr || e.relative_max > by_max->relative_max) by_max = &e;
    if (by_rms == nullptr || e.relative_rms > by_rms->relative_rms) by_rms = &e;
  }
  if (by_max == nullptr) return "no entries";
  std::ostringstream out;
  out << entries_.size() << " entries; largest relative differences: max "
      << Number(by_max->relative_max) << " (" << by_max->name << "), rms "
      << Number(by_rms->relative_rms) << " (" << by_rms->name << ")";
  return out.str();
}

std::string Comparison::Report(const Tolerance& tolerance, int top) const {
  std::vector<const EntryDifference*> sorted;
  for (const EntryDifference& e : entries_) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](const EntryDifference* a, const EntryDifference* b) {
                     return Excess(*a, tolerance) > Excess(*b, tolerance);
                   });
  std::ostringstream out;
  for (int i = 0; i < top && i < static_cast<int>(sorted.size()); ++i) {
    const EntryDifference& e = *sorted[static_cast<size_t>(i)];
    out << "  " << e.name << ": ";
    if (!e.problem.empty()) out << e.problem << "; ";
    if (e.numel > 0 && (e.problem.empty() || !e.where.empty())) {
      if (e.problem.empty()) {
        out << "rms difference " << Number(e.rms_difference) << " (" << Number(e.relative_rms)
            << " of the rms " << Number(e.rms_scale) << "), largest ";
      }
      out << Number(e.max_abs_difference);
      if (!e.where.empty()) out << " at " << IndexString(e.where);
      out << " (expected " << Number(e.expected) << ", seen " << Number(e.seen) << "; "
          << Number(e.relative_max) << " of the largest " << Number(e.max_scale) << ")";
    } else if (e.problem.empty()) {
      out << "empty";
    }
    out << "\n";
  }
  if (static_cast<int>(sorted.size()) > top) {
    out << "  (" << sorted.size() - static_cast<size_t>(top) << " more entries)\n";
  }
  return out.str();
}

::testing::AssertionResult Comparison::Within(const Tolerance& tolerance,
                                              const std::string& what) const {
  int over = 0;
  for (const EntryDifference& e : entries_) {
    if (!(Excess(e, tolerance) <= 1)) ++over;
  }
  if (over == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << over << " of " << entries_.size()
         << " entries differ by more than the tolerance (max " << Number(tolerance.max) << ", rms "
         << Number(tolerance.rms) << " of their scale); nearest or past it:\n"
         << Report(tolerance);
}

double LargestMagnitude(const std::map<std::string, at::Tensor>& tensors) {
  double largest = 0;
  for (const auto& [name, t] : tensors) {
    if (t.numel() > 0) largest = std::max(largest, t.abs().max().item<double>());
  }
  return largest;
}

MixedPrecisionRun TrainWithAutocast(core::Model& model, const core::Batch& batch,
                                    const MixedPrecisionOptions& options) {
  engine::LossScalerOptions scaling;
  scaling.enabled = options.dtype == at::kHalf;
  engine::LossScaler scaler(scaling);
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    params.push_back(item.value());
    names.push_back(item.key());
  }
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(options.lr));
  const c10::DeviceType device = batch.images.device().type();
  model.train();
  MixedPrecisionRun run;
  std::ostringstream log;
  for (int step = 0;
       run.finite_steps < options.finite_steps && run.skipped_steps <= options.max_skipped;
       ++step) {
    sgd.zero_grad();
    std::map<std::string, double> terms;
    at::Tensor total;
    {
      engine::AutocastScope autocast(true, device, options.dtype);
      for (const auto& [name, loss] : model.Losses(batch)) {
        const at::Tensor term = loss.to(at::kFloat);
        terms[name] = term.item<double>();
        total = total.defined() ? total + term : term;
      }
    }
    const double scale = scaler.scale();
    scaler.Scale(total).backward();
    const bool finite = scaler.UnscaleAndCheckFinite(params);
    scaler.Update(finite);
    log << "  step " << step << ": scale " << Number(scale) << ", "
        << (finite ? "finite" : "non-finite gradients, skipped") << ";";
    for (const auto& [name, value] : terms) log << " " << name << " " << Number(value);
    log << "\n";
    if (!finite) {
      ++run.skipped_steps;
      continue;
    }
    if (run.finite_steps == 0) {
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].grad().defined()) {
          run.first_gradients[names[i]] = params[i].grad().detach().to(at::kCPU, at::kDouble);
        }
      }
    }
    torch::nn::utils::clip_grad_norm_(params, options.clip_grad_norm);
    sgd.step();
    ++run.finite_steps;
  }
  run.final_scale = scaler.scale();
  run.log = log.str();
  return run;
}

void CompareSteps(const StepResult& expected, const StepResult& seen,
                  const Tolerance& loss_tolerance, const Tolerance& gradient_tolerance,
                  double gradient_floor, size_t loss_count,
                  const std::vector<std::string>& required_gradients) {
  EXPECT_TRUE(expected.without_gradient.empty()) << expected.without_gradient.front();
  ASSERT_EQ(expected.losses.size(), loss_count);
  for (const std::string& name : required_gradients) {
    ASSERT_EQ(expected.gradients.count(name), 1u) << name;
  }
  const Comparison losses(expected.losses, seen.losses, 0.0);
  std::cout << "losses: " << losses.Summary() << "\n" << losses.Report(loss_tolerance);
  EXPECT_TRUE(losses.Within(loss_tolerance, "losses"));
  const Comparison gradients(expected.gradients, seen.gradients,
                             gradient_floor * LargestMagnitude(expected.gradients));
  std::cout << "gradients: " << gradients.Summary() << "\n" << gradients.Report(gradient_tolerance);
  EXPECT_TRUE(gradients.Within(gradient_tolerance, "gradients"));
}

std::function<void(const StepResult&, const StepResult&, at::ScalarType)> StepsWithin(
    StepComparison compare, const Tolerance& float32_loss, const Tolerance& float32_gradient,
    const Tolerance& float64_loss, const Tolerance& float64_gradient) {
  return [=](const StepResult& expected, const StepResult& seen, at::ScalarType dtype) {
    const bool exact = dtype == at::kDouble;
    compare(expected, seen, exact ? float64_loss : float32_loss,
            exact ? float64_gradient : float32_gradient);
  };
}

double CosineSimilarity(const std::map<std::string, at::Tensor>& a,
                        const std::map<std::string, at::Tensor>& b) {
  double dot = 0, norm_a = 0, norm_b = 0;
  for (const auto& [name, ta] : a) {
    auto it = b.find(name);
    if (it == b.end()) continue;
    const at::Tensor x = ta.to(at::kCPU, at::kDouble);
    const at::Tensor y = it->second.to(at::kCPU, at::kDouble);
    dot += (x * y).sum().item<double>();
    norm_a += (x * x).sum().item<double>();
    norm_b += (y * y).sum().item<double>();
  }
  return norm_a > 0 && norm_b > 0 ? dot / std::sqrt(norm_a * norm_b) : 0.0;
}

void ExpectFiniteAutocastSteps(core::Model& model, const core::Batch& batch, at::ScalarType dtype) {
  const StepResult float32 = LossesAndGradients(model, batch);
  MixedPrecisionOptions options;
  options.dtype = dtype;
  const MixedPrecisionRun run = TrainWithAutocast(model, batch, options);
  std::cout << run.log << run.finite_steps << " finite steps, " << run.skipped_steps
            << " skipped; loss scale " << run.final_scale << "\n";
  ASSERT_EQ(run.finite_steps, options.finite_steps) << run.log;
  const double cosine = CosineSimilarity(float32.gradients, run.first_gradients);
  std::cout << "cosine similarity of the first finite step's gradients with float32's: " << cosine
            << "\n";
  EXPECT_GT(cosine, 0.9);
}

}  // namespace vision::models::testing
