#include "models/testing/step_benchmark.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/optim/sgd.h>
#include <c10/util/Backtrace.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/config/pipeline.pb.h"
#include "core/cpu_convolution.h"
#include "core/param_groups.h"
#include "engine/autocast.h"
#include "engine/optim/optim.pb.h"

namespace vision::models::testing {

absl::StatusOr<AmpMode> ParseAmp(const std::string& name) {
  if (name == "none") return AmpMode{};
  if (name == "bf16") return AmpMode{true, at::kBFloat16};
  if (name == "fp16") return AmpMode{true, at::kHalf};
  return absl::InvalidArgumentError(absl::StrCat("--amp: none, bf16 or fp16, got '", name, "'"));
}

absl::Status SetCpuConvolution(const std::string& name) {
  if (name != "aten" && name != "winograd") {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_convolution: aten or winograd, got '", name, "'"));
  }
  core::SetCpuConvolution(name == "winograd" ? core::CpuConvolution::kWinograd
                                             : core::CpuConvolution::kATen);
  return absl::OkStatus();
}

at::Tensor LossUnderAutocast(const AmpMode& amp, c10::DeviceType device_type,
                             const std::function<std::map<std::string, at::Tensor>()>& losses) {
  engine::AutocastScope autocast(amp.enabled, device_type, amp.dtype);
  at::Tensor total;
  for (const auto& [name, term] : losses()) {
    total = total.defined() ? total + term.to(at::kFloat) : term.to(at::kFloat);
  }
  return total;
}

absl::StatusOr<c10::Device> ParseDevice(const std::string& name) {
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(name);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: cpu, cuda or cuda:N, got '", name, "'"));
  }
  if (device.is_cpu()) return device;
  if (!device.is_cuda()) return absl::InvalidArgumentError("--device: only cpu and cuda are timed");
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", name,
                     ": no CUDA device is visible to this process (or the LibTorch it "
                     "links has no CUDA)"));
  }
  if (!device.has_index()) device.set_index(0);
  if (device.index() >= static_cast<int>(torch::cuda::device_count())) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", name, ": only ", torch::cuda::device_count(), " GPU(s)"));
  }
  return device;
}

void Synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

absl::StatusOr<std::unique_ptr<core::Optimizer>> MakeSgd(const torch::nn::Module& model, double lr,
                                                         double momentum, double weight_decay,
                                                         const std::string& implementation,
                                                         c10::DeviceType device_type) {
  core::OptimizerConfig config;
  config.set_type("SGD");
  config.set_lr(lr);
  config.set_weight_decay(weight_decay);
  core::OptimizerConfig::Implementation parsed;
  if (!core::OptimizerConfig::Implementation_Parse(absl::AsciiStrToUpper(implementation),
                                                   &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer_implementation: auto, for_loop, foreach or fused, got '",
                     implementation, "'"));
  }
  config.set_implementation(parsed);
  engine::optim::SgdOptions sgd;
  sgd.set_momentum(momentum);
  config.mutable_options()->PackFrom(sgd);
  return core::OptimizerRegistry::Get().Create(
      config.type(), config.options(),
      core::OptimizerSpec{core::MakeParamGroups(model, config, config.lr()),
                          config.implementation(), device_type});
}

PhaseTimer::PhaseTimer(const c10::Device& device, int phases) : device_(device), phases_(phases) {
  if (device_.is_cuda()) stream_ = c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
}

void PhaseTimer::Mark() {
  if (!device_.is_cuda()) {
    times_.push_back(std::chrono::steady_clock::now());
    return;
  }
  // BACKEND_DEFAULT: a CUDA event that records timing (PyTorch's default event does not).
  events_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
  events_.back().record(*stream_);
}

std::vector<double> PhaseTimer::MeanMs() const {
  std::vector<double> sums(phases_, 0.0);
  const size_t marks = device_.is_cuda() ? events_.size() : times_.size();
  const size_t steps = marks / (phases_ + 1);
  if (device_.is_cuda() && !events_.empty()) events_.back().synchronize();
  for (size_t s = 0; s < steps; ++s) {
    for (int p = 0; p < phases_; ++p) {
      const size_t i = s * (phases_ + 1) + p;
      sums[p] += device_.is_cuda()
                     ? events_[i].elapsedTime(events_[i + 1])
                     : std::chrono::duration<double, std::milli>(times_[i + 1] - times_[i]).count();
    }
  }
  for (double& sum : sums) sum /= std::max<size_t>(steps, 1);
  return sums;
}

// Counts CUDA's "called a synchronizing CUDA operation" warnings and hands every other warning
// to the handler that was in place.
namespace {

// The function of one backtrace line ("frame #3: at::_ops::item::call(at::Tensor const&) +
// 0x4f (0x7f... in libtorch_cpu.so)"), without its arguments; empty when it has no name.
std::string FrameFunction(absl::string_view line) {
  const size_t colon = line.find(": ");
  if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "frame #") ||
      colon == absl::string_view::npos) {
    return "";
  }
  std::string name(line.substr(colon + 2));
  if (const size_t offset = name.find(" + 0x"); offset != std::string::npos) name.resize(offset);
  // Parentheses inside a name ("(anonymous namespace)", "{lambda()#1}") are not its arguments.
  absl::StrReplaceAll({{"(anonymous namespace)", "{anonymous}"}, {"()#", "#"}, {"[abi:cxx11]", ""}},
                      &name);
  if (const size_t paren = name.find('('); paren != std::string::npos) name.resize(paren);
  if (absl::StartsWith(name, "0x") || name.empty() || name == "<unknown function>") return "";
  return name;
}

bool IsOurs(absl::string_view function) {
  return absl::StartsWith(function, "vision::") &&
         !absl::StartsWith(function, "vision::models::testing::");
}

}  // namespace

std::string SyncSite(const std::string& backtrace) {
  std::string op;
  bool autograd = false;
  for (absl::string_view line : absl::StrSplit(backtrace, '\n')) {
    const std::string function = FrameFunction(line);
    if (function.empty()) continue;
    // Functions in anonymous namespaces (the benchmarks' own step code among them) have no
    // exported name and are skipped above, so an operator the benchmark calls directly is
    // named alone.
    if (IsOurs(function)) {
      return absl::StrCat(op.empty() ? "(no operator)" : op, " in ", function);
    }
    if (absl::StartsWith(function, "at::_ops::")) {
      const absl::string_view rest = absl::string_view(function).substr(10);
      op = std::string(rest.substr(0, rest.find("::")));
    }
    if (absl::StartsWith(function, "torch::autograd::Engine::")) autograd = true;
  }
  if (autograd) return "backward (autograd's replayed warning)";
  return op.empty() ? "(unknown site)" : op;
}

class SyncCounter::Handler : public c10::WarningHandler {
 public:
  explicit Handler(c10::WarningHandler* previous) : previous_(previous) {}
  void process(const c10::Warning& warning) override {
    if (absl::StrContains(warning.msg(), "synchronizing CUDA operation")) {
      const std::string site = SyncSite(c10::get_backtrace(/*frames_to_skip=*/1));
      std::lock_guard<std::mutex> lock(mutex_);
      ++count_;
      ++sites_[site];
    } else if (previous_ != nullptr) {
      previous_->process(warning);
    }
  }
  int64_t count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return count_;
  }
  std::map<std::string, int64_t> sites() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return sites_;
  }

 private:
  c10::WarningHandler* previous_;
  mutable std::mutex mutex_;
  int64_t count_ = 0;
  std::map<std::string, int64_t> sites_;
};

SyncCounter::SyncCounter(const c10::Device& device) {
  if (!device.is_cuda()) return;
  handler_ = std::make_unique<Handler>(c10::WarningUtils::get_warning_handler());
  guard_.emplace(handler_.get());
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
}

SyncCounter::~SyncCounter() {
  if (handler_ == nullptr) return;
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  guard_.reset();
}

int64_t SyncCounter::count() const { return handler_ == nullptr ? 0 : handler_->count(); }

std::vector<std::pair<std::string, int64_t>> SyncCounter::sites() const {
  std::vector<std::pair<std::string, int64_t>> sites;
  if (handler_ == nullptr) return sites;
  for (const auto& [site, count] : handler_->sites()) sites.emplace_back(site, count);
  std::stable_sort(sites.begin(), sites.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return sites;
}

std::string DeviceMemorySummary(const c10::Device& device) {
  if (!device.is_cuda()) return "";
  constexpr double kMiB = 1024.0 * 1024.0;
  const c10::CachingDeviceAllocator::DeviceStats stats =
      c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(device.index());
  constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return absl::StrCat(" peak_allocated_mib=", stats.allocated_bytes[kAll].peak / kMiB,
                      " peak_reserved_mib=", stats.reserved_bytes[kAll].peak / kMiB);
}

void Profile(const c10::Device& device, int steps, double step_ms,
             const std::function<void()>& step) {
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const std::set<ActivityType> activities =
      device.is_cuda() ? std::set<ActivityType>{ActivityType::CPU, ActivityType::CUDA}
                       : std::set<ActivityType>{ActivityType::CPU};
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  for (int i = 0; i < steps; ++i) step();
  Synchronize(device);
  const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  std::map<std::string, double> ms_by_name;
  double busy_ms = 0;
  for (const profiler::KinetoEvent& event : result->events()) {
    if (event.deviceType() != device.type()) continue;
    const double ms = event.durationNs() / 1e6 / steps;
    ms_by_name[event.name()] += ms;
    busy_ms += ms;
  }
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [name, ms] : ms_by_name) ranked.emplace_back(ms, name);
  std::sort(ranked.rbegin(), ranked.rend());
  if (device.is_cuda()) {
    std::printf(
        "profile: device busy %.1f ms of a %.1f ms step (%.0f%%); top kernels, ms per step:\n",
        busy_ms, step_ms, 100 * busy_ms / step_ms);
  } else {
    std::printf("profile: top operators, ms per step including the operators they call:\n");
  }
  for (size_t i = 0; i < std::min<size_t>(ranked.size(), 10); ++i) {
    std::printf("  %8.2f  %s\n", ranked[i].first, ranked[i].second.substr(0, 110).c_str());
  }
}

void ReportSteps(const c10::Device& device, const StepFigures& figures, int sync_steps,
                 int profile_steps, double step_ms, const std::function<void()>& step) {
  int64_t syncs = 0;
  std::vector<std::pair<std::string, int64_t>> sites;
  {
    SyncCounter counter(device);
    for (int i = 0; i < sync_steps; ++i) step();
    syncs = counter.count();
    sites = counter.sites();
  }
  std::string summary = absl::StrCat("summary: device=", device.str(), " amp=", figures.amp,
                                     " images/s=", figures.images_per_second);
  if (figures.cuda_graph) {
    absl::StrAppend(&summary, " step_ms=", figures.phase_ms.at(0), " cuda_graph=1",
                    " optimizer_implementation=", figures.optimizer_implementation);
  } else {
    absl::StrAppend(&summary, " forward_ms=", figures.phase_ms.at(0),
                    " backward_ms=", figures.phase_ms.at(1));
  }
  if (!figures.cuda_graph && !figures.optimizer_implementation.empty()) {
    absl::StrAppend(&summary, " optimizer_ms=", figures.phase_ms.at(2),
                    " optimizer_implementation=", figures.optimizer_implementation);
  }
  if (figures.scaler != nullptr && figures.scaler->enabled()) {
    absl::StrAppend(&summary, " loss_scale=", figures.scaler->scale());
  }
  if (device.is_cuda() && sync_steps > 0) {
    absl::StrAppend(&summary, " syncs_per_step=", static_cast<double>(syncs) / sync_steps);
  }
  absl::StrAppend(&summary, DeviceMemorySummary(device));
  std::printf("%s\n", summary.c_str());
  for (const auto& [site, count] : sites) {
    std::printf("sync site: %g per step: %s\n", static_cast<double>(count) / sync_steps,
                site.c_str());
  }
  std::fflush(stdout);
  if (profile_steps <= 0) return;
  try {
    Profile(device, profile_steps, step_ms, step);
  } catch (const std::exception& e) {
    std::printf("profile: failed: %s\n", e.what());
  }
}

CapturedStep::CapturedStep() = default;
CapturedStep::~CapturedStep() = default;

absl::StatusOr<std::unique_ptr<CapturedStep>> CapturedStep::Capture(
    const c10::Device& device, const std::function<at::Tensor()>& step, core::Optimizer& optimizer,
    int warmup) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError("--cuda_graph: CUDA graphs need a CUDA device");
  }
  if (!optimizer.SkipsOnDevice()) {
    return absl::InvalidArgumentError(
        "--cuda_graph: the optimizer must skip non-finite steps on the device (SGD with "
        "--optimizer_implementation=fused or auto): a host-side check cannot be captured");
  }
  std::unique_ptr<CapturedStep> captured(new CapturedStep());
  captured->graph_ = std::make_unique<at::cuda::CUDAGraph>();
  c10::cuda::CUDAGuard device_guard(device);
  const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAEvent main_ready;
  main_ready.record(main);
  main_ready.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    for (int i = 0; i < warmup; ++i) {
      step();
      optimizer.torch_optimizer().zero_grad(/*set_to_none=*/true);
    }
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    try {
      captured->graph_->capture_begin();
      captured->loss_ = step();
      captured->graph_->capture_end();
    } catch (const std::exception& e) {
      at::autocast::set_autocast_cache_enabled(cache);
      return absl::InternalError(absl::StrCat("capturing the training step: ", e.what()));
    }
    at::autocast::set_autocast_cache_enabled(cache);
  }
  at::cuda::CUDAEvent side_done;
  side_done.record(side);
  side_done.block(main);
  return captured;
}

void CapturedStep::Replay() { graph_->replay(); }

std::vector<at::Tensor> TrainingStateTensors(const torch::nn::Module& model,
                                             core::Optimizer& optimizer) {
  std::vector<at::Tensor> state = model.parameters();
  for (const at::Tensor& b : model.buffers()) state.push_back(b);
  for (const auto& [key, entry] : optimizer.torch_optimizer().state()) {
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(entry.get())) {
      if (sgd->momentum_buffer().defined()) state.push_back(sgd->momentum_buffer());
    }
  }
  return state;
}

absl::StatusOr<std::string> CheckReplayAgainstEager(const std::function<at::Tensor()>& replay,
                                                    const std::function<at::Tensor()>& step,
                                                    core::Optimizer& optimizer,
                                                    const std::vector<at::Tensor>& params,
                                                    const std::vector<at::Tensor>& state,
                                                    double tolerance) {
  std::vector<at::Tensor> saved, before;
  {
    at::NoGradGuard no_grad;
    for (const at::Tensor& t : state) saved.push_back(t.detach().clone());
    for (const at::Tensor& p : params) before.push_back(p.detach().clone());
  }
  // The eager backward accumulates into the graph's gradient tensors: zero them in place.
  optimizer.torch_optimizer().zero_grad(/*set_to_none=*/false);
  const double eager_loss = step().item<double>();
  std::vector<at::Tensor> eager_update;
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      eager_update.push_back(params[i].detach() - before[i]);
    }
    for (size_t i = 0; i < state.size(); ++i) state[i].detach().copy_(saved[i]);
  }
  const double replay_loss = replay().item<double>();
  double difference = 0, norm = 0;
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor update = params[i].detach() - before[i];
      difference += (update - eager_update[i]).to(at::kDouble).pow(2).sum().item<double>();
      norm += eager_update[i].to(at::kDouble).pow(2).sum().item<double>();
    }
  }
  difference = std::sqrt(difference);
  norm = std::sqrt(norm);
  const double relative_update = difference / std::max(norm, 1e-300);
  const double relative_loss =
      std::abs(replay_loss - eager_loss) / std::max(std::abs(eager_loss), 1e-300);
  const std::string line = absl::StrCat(
      "cuda graph check: loss eager ", eager_loss, ", replayed ", replay_loss, " (relative ",
      relative_loss, "); parameter update replayed against eager: difference ", relative_update,
      " of its norm ", norm, " (tolerance ", tolerance, ")");
  if (norm == 0 || relative_update > tolerance || relative_loss > tolerance) {
    return absl::InternalError(line);
  }
  return line;
}

int RunCapturedSteps(const c10::Device& device, const std::function<at::Tensor()>& step,
                     const torch::nn::Module& model, core::Optimizer& optimizer, int batch,
                     int steps, int warmup, StepFigures figures, int sync_steps,
                     int profile_steps) {
  absl::StatusOr<std::unique_ptr<CapturedStep>> captured =
      CapturedStep::Capture(device, step, optimizer, std::max(warmup, 1));
  if (!captured.ok()) {
    std::printf("cuda graph: %s\n", std::string(captured.status().message()).c_str());
    return 1;
  }
  const absl::StatusOr<std::string> check = CheckReplayAgainstEager(
      [&] {
        (*captured)->Replay();
        return (*captured)->loss();
      },
      step, optimizer, model.parameters(), TrainingStateTensors(model, optimizer),
      /*tolerance=*/1e-2);
  std::printf("%s\n", check.ok() ? check->c_str() : std::string(check.status().message()).c_str());
  std::fflush(stdout);
  if (!check.ok()) return 1;
  Synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) (*captured)->Replay();
  Synchronize(device);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
      std::max(steps, 1);
  figures.cuda_graph = true;
  figures.phase_ms = {seconds * 1000};
  figures.images_per_second = batch / seconds;
  ReportSteps(device, figures, sync_steps, profile_steps, seconds * 1000,
              [&] { (*captured)->Replay(); });
  return 0;
}

}  // namespace vision::models::testing
