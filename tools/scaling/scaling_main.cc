// How a recipe scales with the number of training processes:
//   bazel run //tools/scaling -- --config=models/dbnet/configs/quickstart.pbtxt --nproc=1,2,4,8
//       [--steps=20] [--warmup_steps=5] [--output_dir=runs/scaling] [--override='TEXT' ...]
// Trains the config for --warmup_steps + --steps steps at each process count through the
// launcher (//tools:launch, one process per GPU with device "cuda"), on the config's device,
// with the step timeline on for the last --steps steps (logging.trace), and prints one row per
// count: images/s over all processes (images per step / mean `step` span: the time between
// steps is not counted) and per process, speed-up and efficiency against the smallest count,
// the step split into data wait / forward / backward / communication wait (finish_backward) /
// optimizer, the share of gradient communication inside backward, and rank 0's peak RSS.
// The runs evaluate nothing and write one checkpoint, after the timed steps. Each count runs in
// <output_dir>/nproc_<n> (its config.pbtxt, log.txt, trace_rank<k>.json); the table also goes
// to <output_dir>/scaling.json and a plot to <output_dir>/scaling.png.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/atomic_output.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "engine/device.h"
#include "tools/flags_util.h"
#include "tools/scaling/plot.h"
#include "tools/scaling/scaling.h"

ABSL_FLAG(std::string, config, "", "Path of the pipeline config (.pbtxt) to measure.");
ABSL_FLAG(std::string, nproc, "1,2,4,8",
          "Process counts to run, separated by commas; with device \"cuda\" at most the number "
          "of visible GPUs.");
ABSL_FLAG(int, steps, 20, "Timed (traced) training steps per run, after the warm-up.");
ABSL_FLAG(int, warmup_steps, 5, "Training steps per run before the timed ones (not measured).");
ABSL_FLAG(std::string, output_dir, "runs/scaling",
          "Where each run's directory (nproc_<n>) and scaling.json / scaling.png go.");
ABSL_FLAG(std::string, trainer, "",
          "The trainer binary (default: //tools:train from this tool's runfiles).");
ABSL_FLAG(std::string, launcher, "",
          "The launcher binary (default: //tools:launch from this tool's runfiles).");

extern char** environ;

namespace vision::tools::scaling {
namespace {

namespace fs = std::filesystem;

// The main repository in this binary's runfiles (found before main() leaves the directory it
// was started in); empty when there is none.
std::string& RunfilesRoot() {
  static std::string root;
  return root;
}

void FindRunfiles(const char* argv0) {
  std::vector<std::string> candidates = {absl::StrCat(argv0, ".runfiles")};
  for (const char* variable : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* value = std::getenv(variable); value != nullptr && *value != '\0') {
      candidates.push_back(value);
    }
  }
  for (const std::string& dir : candidates) {
    std::error_code error;
    const fs::path root = fs::absolute(fs::path(dir) / "vision", error).lexically_normal();
    if (!error && fs::is_directory(root, error)) {
      RunfilesRoot() = root.string();
      return;
    }
  }
}

absl::StatusOr<std::string> Binary(const std::string& flag_value, const char* flag,
                                   const char* label, const char* runfiles_path) {
  if (!flag_value.empty()) {
    std::error_code error;
    if (!fs::exists(flag_value, error)) {
      return absl::NotFoundError(absl::StrCat("--", flag, "=", flag_value, ": no such file"));
    }
    return fs::absolute(flag_value).string();
  }
  const std::string path = absl::StrCat(RunfilesRoot(), "/", runfiles_path);
  std::error_code error;
  if (RunfilesRoot().empty() || !fs::exists(path, error)) {
    return absl::NotFoundError(absl::StrCat(
        label, " is not in this tool's runfiles (", path,
        "): run the tool with `bazel run //tools/scaling -- ...`, or give --", flag, "=PATH"));
  }
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string LastLines(const std::string& text, int count) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.size() > static_cast<size_t>(count)) lines.erase(lines.begin(), lines.end() - count);
  return absl::StrJoin(lines, "\n");
}

struct Finished {
  int exit_code = 0;  // 128 + N for death by signal N
  // The largest resident set of the process and of every descendant it waited for (Linux
  // ru_maxrss of wait4): for the launcher, the largest worker.
  double max_rss_mib = 0;
};

// Runs `command` with stdout and stderr to `log_path` and waits for it.
absl::StatusOr<Finished> RunLogged(const std::vector<std::string>& command,
                                   const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start ", command[0], ": ", std::strerror(spawned)));
  }
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("waiting for ", command[0], ": ", std::strerror(errno)));
    }
  }
  Finished finished;
  finished.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  finished.max_rss_mib = usage.ru_maxrss / 1024.0;  // Linux reports KiB
  return finished;
}

std::string Quoted(const std::vector<std::string>& command) {
  std::vector<std::string> words;
  for (const std::string& word : command) {
    const bool plain = word.find_first_of(" '\"\\$`*?") == std::string::npos;
    words.push_back(plain ? word
                          : absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'"));
  }
  return absl::StrJoin(words, " ");
}

// The config of the timed runs: the recipe for warmup + steps steps, the trace on the last
// `steps`, no evaluation, one checkpoint at the end, no resuming from an earlier run.
core::TrainPipelineConfig TimedConfig(core::TrainPipelineConfig config, int warmup, int steps,
                                      const std::string& run_dir) {
  config.clear_eval_data();
  config.clear_evaluation();
  core::TrainLoopConfig& train = *config.mutable_train();
  train.clear_max_epochs();
  train.set_max_steps(warmup + steps);
  core::CheckpointConfig& checkpoint = *config.mutable_checkpoint();
  checkpoint.set_output_dir(run_dir);
  checkpoint.set_every_n_steps(0);
  checkpoint.set_keep_last(1);
  checkpoint.set_keep_best(false);
  checkpoint.set_auto_resume(false);
  core::LoggingConfig& logging = *config.mutable_logging();
  logging.set_every_n_steps(warmup + steps);
  logging.set_tensorboard(false);
  core::TraceConfig& trace = *logging.mutable_trace();
  trace.set_start_step(warmup);
  trace.set_num_steps(steps);
  trace.set_path(run_dir);
  return config;
}

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (config_path.empty()) {
    return absl::InvalidArgumentError(
        "--config is required: the pipeline config to measure, e.g. "
        "--config=models/dbnet/configs/quickstart.pbtxt");
  }
  VISION_ASSIGN_OR_RETURN(const std::vector<int> counts,
                          ParseProcessCounts(absl::GetFlag(FLAGS_nproc)));
  const int steps = absl::GetFlag(FLAGS_steps), warmup = absl::GetFlag(FLAGS_warmup_steps);
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--steps=", steps, ": at least 1 timed step"));
  }
  if (warmup < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--warmup_steps=", warmup, ": must be >= 0"));
  }
  VISION_ASSIGN_OR_RETURN(const core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(config_path, overrides));
  if (config.device() != "cpu") {
    VISION_RETURN_IF_ERROR(core::WithContext(
        config_path,
        CheckProcessCounts(counts, config.device(), static_cast<int>(torch::cuda::device_count()),
                           engine::BuildDescription())));
  }
  VISION_ASSIGN_OR_RETURN(const std::string trainer, Binary(absl::GetFlag(FLAGS_trainer), "trainer",
                                                            "//tools:train", "tools/train"));
  VISION_ASSIGN_OR_RETURN(
      const std::string launcher,
      Binary(absl::GetFlag(FLAGS_launcher), "launcher", "//tools:launch", "tools/launch"));
  const int images_per_process_step =
      config.train_data().loader().batch_size() * config.train().gradient_accumulation_steps();

  // The pipeline built once here (for the largest count): a plugin or data problem stops the
  // tool before it writes or starts anything.
  const fs::path output_dir = fs::absolute(absl::GetFlag(FLAGS_output_dir));
  const int largest = *std::max_element(counts.begin(), counts.end());
  VISION_RETURN_IF_ERROR(core::WithContext(
      absl::StrCat(config_path, " (built for ", largest, " processes)"),
      core::BuildPipeline(TimedConfig(config, warmup, steps, output_dir.string()), largest)
          .status()));

  std::vector<std::string> run_dirs, run_configs;
  for (const int n : counts) {
    const fs::path dir = output_dir / absl::StrCat("nproc_", n);
    std::error_code error;
    fs::create_directories(dir, error);
    if (error) {
      return absl::UnavailableError(
          absl::StrCat("cannot create ", dir.string(), ": ", error.message()));
    }
    // A trace left by an earlier run must not be read as this run's.
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("trace_rank", 0) == 0) fs::remove(entry.path(), error);
    }
    const std::string run_config = (dir / "config.pbtxt").string();
    VISION_RETURN_IF_ERROR(core::WriteFileAtomically(
        run_config,
        absl::StrCat("# Written by tools/scaling from ", config_path, " for ", n, " process(es).\n",
                     core::ConfigToText(TimedConfig(config, warmup, steps, dir.string())))));
    run_dirs.push_back(dir.string());
    run_configs.push_back(run_config);
  }
  std::printf("scaling %s: %d warm-up + %d timed steps of %d image(s) per process, device %s\n",
              config_path.c_str(), warmup, steps, images_per_process_step, config.device().c_str());
  const unsigned cores = std::thread::hardware_concurrency();
  std::vector<RunMeasurement> runs;
  nlohmann::ordered_json runs_json = nlohmann::ordered_json::object();
  for (size_t i = 0; i < counts.size(); ++i) {
    const int n = counts[i];
    const std::vector<std::string> command = {
        launcher, absl::StrCat("--nproc_per_node=", n),     "--master_port=0", "--",
        trainer,  absl::StrCat("--config=", run_configs[i])};
    const std::string log = absl::StrCat(run_dirs[i], "/log.txt");
    std::printf("%d process(es)%s: %s > %s\n", n,
                config.device() == "cpu" && cores > 0 && static_cast<unsigned>(n) > cores
                    ? absl::StrCat(" (more than the ", cores, " cores)").c_str()
                    : "",
                Quoted(command).c_str(), log.c_str());
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    VISION_ASSIGN_OR_RETURN(const Finished finished, RunLogged(command, log));
    if (finished.exit_code != 0) {
      return absl::AbortedError(absl::StrCat(
          "the run of ", n, " process(es) failed (launcher exit code ", finished.exit_code,
          "); the last lines of ", log, ":\n", LastLines(ReadFile(log), 15)));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Timings from a busy machine mislead; the load says whether others shared the cores.
    double load = -1;
    ::getloadavg(&load, 1);
    std::printf("  done in %.1f s; load average (1 min) %.2f on %u cores\n", seconds, load, cores);
    RunMeasurement run;
    run.processes = n;
    run.images_per_process_step = images_per_process_step;
    for (int rank = 0; rank < n; ++rank) {
      const std::string trace = absl::StrCat(run_dirs[i], "/trace_rank", rank, ".json");
      std::error_code error;
      if (!fs::exists(trace, error)) {
        return absl::NotFoundError(absl::StrCat(trace, " was not written: the run of ", n,
                                                " process(es) ended before its trace "
                                                "window closed; see ",
                                                log));
      }
      VISION_ASSIGN_OR_RETURN(const std::vector<Span> spans, ParseTrace(ReadFile(trace), trace));
      VISION_ASSIGN_OR_RETURN(RankTiming timing, TimeRank(spans, trace));
      run.ranks.push_back(timing);
    }
    const std::string log_text = ReadFile(log);
    run.peak_rss_mib_rank0 = ParseRank0PeakRssMiB(log_text);
    run.peak_cuda_mib_rank0 = ParseRank0PeakCudaMiB(log_text);
    run.peak_rss_mib_max = finished.max_rss_mib;
    runs.push_back(std::move(run));
    nlohmann::ordered_json& about = runs_json[std::to_string(n)];
    about["command"] = Quoted(command);
    about["log"] = log;
    about["wall_seconds"] = seconds;
    about["load_average_1min"] = load;
  }

  VISION_ASSIGN_OR_RETURN(const std::vector<ScalingRow> rows, ScalingTable(runs));
  const std::string table = FormatTable(rows);
  std::printf("\n%s", table.c_str());

  nlohmann::ordered_json json;
  json["config"] = config_path;
  json["overrides"] = overrides;
  json["device"] = config.device();
  json["warmup_steps"] = warmup;
  json["steps"] = steps;
  json["images_per_process_step"] = images_per_process_step;
  json["baseline_processes"] = rows.front().processes;
  json["rows"] = RowsToJson(rows);
  json["cores"] = cores;
  json["runs"] = runs_json;
  const std::string json_path = (output_dir / "scaling.json").string();
  VISION_RETURN_IF_ERROR(core::WriteFileAtomically(json_path, json.dump(2) + "\n"));

  std::vector<uchar> png;
  const cv::Mat plot =
      DrawScalingPlot(rows, absl::StrCat(config.name().empty() ? config_path : config.name(),
                                         " on ", config.device(), ": ", steps, " timed steps of ",
                                         images_per_process_step, " image(s) per process"));
  if (!cv::imencode(".png", plot, png)) {
    return absl::InternalError("OpenCV could not encode the plot as PNG");
  }
  const std::string png_path = (output_dir / "scaling.png").string();
  VISION_RETURN_IF_ERROR(core::WriteFileAtomically(png_path, std::string(png.begin(), png.end())));
  std::printf("\nwritten: %s, %s\n", json_path.c_str(), png_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools::scaling

int main(int argc, char** argv) {
  vision::tools::scaling::FindRunfiles(argv[0]);
  return vision::tools::RunDriver(
      argc, argv,
      "Trains a config for a few steps at several process counts and prints how it scales.\n"
      "  scaling --config=FILE --nproc=1,2,4,8 [--steps=N] [--warmup_steps=M] "
      "[--output_dir=DIR] [--override='TEXT' ...]\n"
      "--override merges text-format config into the recipe (repeatable, applied in order).",
      vision::tools::scaling::Run);
}
