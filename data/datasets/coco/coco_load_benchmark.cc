// Loads a COCO annotation file once and prints what it cost, for benchmarks/coco_load.sh:
//
//   coco_load_benchmark --annotations=FILE [--reader=index|reference] [--cache=AUTO|OFF]
//       [--cache_dir=DIR] [--ranks=N --sync_dir=DIR]
//
// --reader=index opens it as the COCO dataset does (CocoDataset::Create: the compact index,
// from the cache when there is one); --reader=reference with the reader before the index
// (nlohmann tree, coco_reference_reader.h). With --ranks and --sync_dir, N copies started
// together wait for each other after loading, so that the memory they report is measured
// while all of them map the cache (a shared page counts 1/N in each one's Pss).
//
// Prints one line: seconds, peak RSS (VmHWM), and from /proc/self/smaps_rollup the RSS now
// split into its private and shared parts, and Pss (the process's share of the node's RAM).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "data/datasets/coco/coco.pb.h"
#include "data/datasets/coco/coco_dataset.h"
#include "data/datasets/coco/coco_reference_reader.h"

ABSL_FLAG(std::string, annotations, "", "The COCO instances JSON.");
ABSL_FLAG(std::string, reader, "index", "index (CocoDataset) or reference (nlohmann tree).");
ABSL_FLAG(std::string, cache, "AUTO", "CocoOptions.cache: AUTO or OFF.");
ABSL_FLAG(std::string, cache_dir, "", "CocoOptions.cache_dir.");
ABSL_FLAG(int, ranks, 1, "Processes started together (with --sync_dir).");
ABSL_FLAG(std::string, sync_dir, "", "Directory where the ranks meet after loading.");
ABSL_FLAG(std::string, label, "", "Printed first on the line.");

namespace {

namespace coco = vision::data::datasets::coco;
using vision::data::datasets::CocoOptions;

// Fields of /proc/self/status or smaps_rollup, in KiB.
std::map<std::string, long> ReadKib(const std::string& path) {
  std::map<std::string, long> fields;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string key;
    long value = 0;
    if (in >> key >> value) fields[key.substr(0, key.size() - 1)] = value;
  }
  return fields;
}

double CpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string path = absl::GetFlag(FLAGS_annotations);
  if (path.empty()) {
    std::cerr << "--annotations is required\n";
    return 2;
  }
  const std::filesystem::path json(path);
  CocoOptions options;
  options.set_root(json.parent_path().string());
  options.set_annotation_file(json.filename().string());
  options.set_empty_images(CocoOptions::KEEP);
  CocoOptions::CacheMode mode;
  if (!CocoOptions::CacheMode_Parse(absl::GetFlag(FLAGS_cache), &mode)) {
    std::cerr << "--cache must be AUTO or OFF\n";
    return 2;
  }
  options.set_cache(mode);
  options.set_cache_dir(absl::GetFlag(FLAGS_cache_dir));

  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = CpuSeconds();
  std::string what;
  int64_t samples = 0;
  std::unique_ptr<coco::CocoDataset> dataset;
  if (absl::GetFlag(FLAGS_reader) == "reference") {
    absl::StatusOr<coco::ReferenceCoco> reference = coco::ReadCocoReference(options);
    if (!reference.ok()) {
      std::cerr << reference.status() << "\n";
      return 1;
    }
    samples = static_cast<int64_t>(reference->images.size());
    what = "nlohmann tree";
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto status = ReadKib("/proc/self/status");
    std::printf("%s seconds %.3f cpu_seconds %.3f samples %lld peak_rss_mib %.0f\n",
                absl::GetFlag(FLAGS_label).c_str(), seconds, CpuSeconds() - cpu_start,
                static_cast<long long>(samples), status["VmHWM"] / 1024.0);
    return 0;
  }
  absl::StatusOr<std::unique_ptr<coco::CocoDataset>> created = coco::CocoDataset::Create(options);
  if (!created.ok()) {
    std::cerr << created.status() << "\n";
    return 1;
  }
  dataset = std::move(*created);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_seconds = CpuSeconds() - cpu_start;
  samples = dataset->Size();

  const std::string sync_dir = absl::GetFlag(FLAGS_sync_dir);
  if (!sync_dir.empty()) {
    std::ofstream(std::filesystem::path(sync_dir) / absl::StrCat("loaded.", ::getpid()));
    for (;;) {
      int loaded = 0;
      for (const auto& entry : std::filesystem::directory_iterator(sync_dir)) {
        loaded += entry.path().filename().string().rfind("loaded.", 0) == 0;
      }
      if (loaded >= absl::GetFlag(FLAGS_ranks)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  auto status = ReadKib("/proc/self/status");
  auto smaps = ReadKib("/proc/self/smaps_rollup");
  std::printf(
      "%s seconds %.3f cpu_seconds %.3f samples %lld peak_rss_mib %.0f rss_mib %.0f private_mib "
      "%.0f "
      "shared_mib %.0f pss_mib %.0f | %s\n",
      absl::GetFlag(FLAGS_label).c_str(), seconds, cpu_seconds, static_cast<long long>(samples),
      status["VmHWM"] / 1024.0, smaps["Rss"] / 1024.0,
      (smaps["Private_Clean"] + smaps["Private_Dirty"]) / 1024.0,
      (smaps["Shared_Clean"] + smaps["Shared_Dirty"]) / 1024.0, smaps["Pss"] / 1024.0,
      dataset->index_report().c_str());
  if (!sync_dir.empty()) {
    // Stay until every rank has measured, so that each sees the others' mappings.
    std::ofstream(std::filesystem::path(sync_dir) / absl::StrCat("measured.", ::getpid()));
    for (;;) {
      int measured = 0;
      for (const auto& entry : std::filesystem::directory_iterator(sync_dir)) {
        measured += entry.path().filename().string().rfind("measured.", 0) == 0;
      }
      if (measured >= absl::GetFlag(FLAGS_ranks)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return 0;
}
