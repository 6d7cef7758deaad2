#include "distributed/env/distributed_env.h"

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "core/status_util.h"

namespace vision::distributed::env {
namespace {

using GetEnv = std::function<const char*(const char*)>;

constexpr char kTorchrunSetsIt[] = "torchrun and //tools:launch set it for every worker";
constexpr char kSrunSetsIt[] = "srun sets it for every task";
constexpr char kTorchrunMarker[] = "RANK or WORLD_SIZE is set, which marks a torchrun-style job";
constexpr char kSlurmMarker[] = "SLURM_PROCID is set, which marks an srun task";

// Lightning's choice: a per-job port so two jobs sharing a node do not collide.
constexpr int kSlurmPortBase = 15000;
constexpr int kSlurmPortSpan = 10000;

// Bounds SLURM_TASKS_PER_NODE's expansion; far above any real cluster.
constexpr int kMaxSlurmNodes = 1 << 20;

// Parses a non-empty decimal number without sign.
bool ParseDigits(absl::string_view text, uint64_t* value) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(text, value);
}

// An empty value counts as unset: `export RANK=` is how shells clear a variable.
std::optional<std::string> Lookup(const GetEnv& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

absl::StatusOr<std::optional<int>> LookupInt(const GetEnv& getenv, const char* name,
                                             absl::string_view who_sets_it) {
  std::optional<std::string> text = Lookup(getenv, name);
  if (!text.has_value()) return std::optional<int>();
  int value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", *text, "' is not an integer (",
                                                   who_sets_it, "); fix or unset it."));
  }
  return std::optional<int>(value);
}

// `why_needed` completes "NAME is not set although ...".
absl::StatusOr<int> RequireInt(const GetEnv& getenv, const char* name,
                               absl::string_view who_sets_it, absl::string_view why_needed) {
  VISION_ASSIGN_OR_RETURN(std::optional<int> value, LookupInt(getenv, name, who_sets_it));
  if (!value.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set although ", why_needed, "; ",
                                                   who_sets_it,
                                                   ". Set it or start the program through that "
                                                   "launcher."));
  }
  return *value;
}

absl::Status CheckAtLeast(const char* name, int value, int minimum) {
  if (value >= minimum) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, "=", value, " must be at least ", minimum, "."));
}

// `index_name`=`index` must address one of `size_name`=`size` slots.
absl::Status CheckIndex(const char* index_name, int index, const char* size_name, int size) {
  if (index >= 0 && index < size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(index_name, "=", index, " is outside [0, ",
                                                 size_name, "=", size, "): valid values are 0..",
                                                 size - 1, "."));
}

absl::Status CheckPort(const char* name, int port) {
  if (port >= 1 && port <= 65535) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, "=", port, " is not a TCP port; use a free port in 1..65535."));
}

// Overrides shared by every source; `who_sets_it` names the launcher for error messages.
absl::Status ReadCommon(const GetEnv& getenv, absl::string_view who_sets_it, DistributedEnv& env) {
  VISION_ASSIGN_OR_RETURN(std::optional<int> restarts,
                          LookupInt(getenv, "TORCHELASTIC_RESTART_COUNT", kTorchrunSetsIt));
  if (restarts.has_value()) {
    VISION_RETURN_IF_ERROR(CheckAtLeast("TORCHELASTIC_RESTART_COUNT", *restarts, 0));
    env.restart_count = *restarts;
  }
  VISION_ASSIGN_OR_RETURN(std::optional<int> node_rank,
                          LookupInt(getenv, "NODE_RANK", "//tools:launch sets it per node"));
  if (node_rank.has_value()) {
    VISION_RETURN_IF_ERROR(CheckAtLeast("NODE_RANK", *node_rank, 0));
    env.node_rank = node_rank;
  }
  VISION_ASSIGN_OR_RETURN(std::optional<int> port, LookupInt(getenv, "MASTER_PORT", who_sets_it));
  if (port.has_value()) {
    VISION_RETURN_IF_ERROR(CheckPort("MASTER_PORT", *port));
    env.master_port = *port;
  }
  if (std::optional<std::string> addr = Lookup(getenv, "MASTER_ADDR"); addr.has_value()) {
    env.master_addr = *addr;
  }
  return absl::OkStatus();
}

absl::StatusOr<DistributedEnv> ReadTorchrun(const GetEnv& getenv) {
  DistributedEnv env;
  env.source = EnvSource::kTorchrun;
  VISION_ASSIGN_OR_RETURN(env.world_size,
                          RequireInt(getenv, "WORLD_SIZE", kTorchrunSetsIt, kTorchrunMarker));
  VISION_ASSIGN_OR_RETURN(env.rank, RequireInt(getenv, "RANK", kTorchrunSetsIt, kTorchrunMarker));
  VISION_RETURN_IF_ERROR(CheckAtLeast("WORLD_SIZE", env.world_size, 1));
  VISION_RETURN_IF_ERROR(CheckIndex("RANK", env.rank, "WORLD_SIZE", env.world_size));

  // Hand-written env:// setups export only RANK and WORLD_SIZE; they run on one node.
  VISION_ASSIGN_OR_RETURN(std::optional<int> local_world_size,
                          LookupInt(getenv, "LOCAL_WORLD_SIZE", kTorchrunSetsIt));
  env.local_world_size = local_world_size.value_or(env.world_size);
  VISION_RETURN_IF_ERROR(CheckAtLeast("LOCAL_WORLD_SIZE", env.local_world_size, 1));
  if (env.local_world_size > env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LOCAL_WORLD_SIZE=", env.local_world_size, " exceeds WORLD_SIZE=", env.world_size,
        ": a node cannot run more processes than the job has."));
  }
  VISION_ASSIGN_OR_RETURN(std::optional<int> local_rank,
                          LookupInt(getenv, "LOCAL_RANK", kTorchrunSetsIt));
  if (!local_rank.has_value() && env.local_world_size != env.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("LOCAL_RANK is not set but LOCAL_WORLD_SIZE=", env.local_world_size,
                     " < WORLD_SIZE=", env.world_size, " says the job spans several nodes (",
                     kTorchrunSetsIt, "); without it the device cannot be chosen."));
  }
  env.local_rank = local_rank.value_or(env.rank);
  VISION_RETURN_IF_ERROR(
      CheckIndex("LOCAL_RANK", env.local_rank, "LOCAL_WORLD_SIZE", env.local_world_size));

  VISION_ASSIGN_OR_RETURN(std::optional<int> group_rank,
                          LookupInt(getenv, "GROUP_RANK", kTorchrunSetsIt));
  env.group_rank = group_rank.value_or(env.rank / env.local_world_size);
  VISION_RETURN_IF_ERROR(CheckIndex("GROUP_RANK", env.group_rank, "WORLD_SIZE", env.world_size));

  VISION_RETURN_IF_ERROR(ReadCommon(getenv, kTorchrunSetsIt, env));
  if (env.world_size > 1) {
    // Defaults would let every node wait on its own localhost store forever.
    for (const char* name : {"MASTER_ADDR", "MASTER_PORT"}) {
      if (!Lookup(getenv, name).has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " is not set but WORLD_SIZE=", env.world_size, " (", kTorchrunSetsIt,
                         " from --master_addr/--master_port); set it to rank 0's ",
                         name == absl::string_view("MASTER_ADDR") ? "host name or IP address"
                                                                  : "rendezvous port",
                         "."));
      }
    }
  }
  return env;
}

absl::StatusOr<int> SlurmLocalWorldSize(const GetEnv& getenv, std::optional<int> node_id) {
  VISION_ASSIGN_OR_RETURN(std::optional<int> per_node,
                          LookupInt(getenv, "SLURM_NTASKS_PER_NODE", kSrunSetsIt));
  if (per_node.has_value()) return *per_node;
  std::optional<std::string> text = Lookup(getenv, "SLURM_TASKS_PER_NODE");
  if (!text.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set but SLURM_PROCID is (",
        kSrunSetsIt,
        "); launch the job with srun, or export LOCAL_WORLD_SIZE and the other "
        "torchrun variables instead."));
  }
  VISION_ASSIGN_OR_RETURN(const std::vector<int> counts,
                          core::WithContext(absl::StrCat("SLURM_TASKS_PER_NODE='", *text, "'"),
                                            ParseSlurmTasksPerNode(*text)));
  const int node = node_id.value_or(0);
  if (!node_id.has_value() && counts.size() > 1) {
    for (int count : counts) {
      if (count != counts.front()) {
        return absl::InvalidArgumentError(
            absl::StrCat("SLURM_TASKS_PER_NODE='", *text,
                         "' differs between nodes but SLURM_NODEID is not "
                         "set (",
                         kSrunSetsIt, "); cannot tell this node's task count."));
      }
    }
  }
  if (node < 0 || node >= static_cast<int>(counts.size())) {
    return absl::InvalidArgumentError(absl::StrCat("SLURM_NODEID=", node,
                                                   " has no entry in SLURM_TASKS_PER_NODE='", *text,
                                                   "' (", counts.size(), " nodes)."));
  }
  return counts[node];
}

absl::StatusOr<DistributedEnv> ReadSlurm(const GetEnv& getenv) {
  DistributedEnv env;
  env.source = EnvSource::kSlurm;
  VISION_ASSIGN_OR_RETURN(env.rank, RequireInt(getenv, "SLURM_PROCID", kSrunSetsIt, kSlurmMarker));
  VISION_ASSIGN_OR_RETURN(std::optional<int> ntasks,
                          LookupInt(getenv, "SLURM_NTASKS", kSrunSetsIt));
  if (!ntasks.has_value()) {
    VISION_ASSIGN_OR_RETURN(ntasks, LookupInt(getenv, "SLURM_NPROCS", kSrunSetsIt));
  }
  if (!ntasks.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SLURM_NTASKS is not set but SLURM_PROCID is (", kSrunSetsIt,
        "); run the program through srun with --ntasks, or export the torchrun variables."));
  }
  env.world_size = *ntasks;
  VISION_RETURN_IF_ERROR(CheckAtLeast("SLURM_NTASKS", env.world_size, 1));
  VISION_RETURN_IF_ERROR(CheckIndex("SLURM_PROCID", env.rank, "SLURM_NTASKS", env.world_size));

  VISION_ASSIGN_OR_RETURN(std::optional<int> node_id,
                          LookupInt(getenv, "SLURM_NODEID", kSrunSetsIt));
  if (node_id.has_value()) VISION_RETURN_IF_ERROR(CheckAtLeast("SLURM_NODEID", *node_id, 0));
  VISION_ASSIGN_OR_RETURN(env.local_rank,
                          RequireInt(getenv, "SLURM_LOCALID", kSrunSetsIt, kSlurmMarker));
  VISION_ASSIGN_OR_RETURN(env.local_world_size, SlurmLocalWorldSize(getenv, node_id));
  VISION_RETURN_IF_ERROR(CheckAtLeast("tasks per node", env.local_world_size, 1));
  VISION_RETURN_IF_ERROR(
      CheckIndex("SLURM_LOCALID", env.local_rank, "tasks per node", env.local_world_size));
  env.group_rank = node_id.value_or(0);
  env.node_rank = node_id;

  if (std::optional<std::string> job_id = Lookup(getenv, "SLURM_JOB_ID"); job_id.has_value()) {
    uint64_t id = 0;
    if (!ParseDigits(*job_id, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_JOB_ID='", *job_id,
                       "' is not a job number (sbatch, salloc and srun set it); "
                       "export MASTER_PORT to bypass it."));
    }
    env.master_port = kSlurmPortBase + static_cast<int>(id % kSlurmPortSpan);
  }
  for (const char* name : {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    std::optional<std::string> hostlist = Lookup(getenv, name);
    if (!hostlist.has_value()) continue;
    absl::StatusOr<std::string> first = FirstHostOfHostlist(*hostlist);
    if (!first.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "='", *hostlist, "': ", first.status().message(),
                       " Export MASTER_ADDR to bypass the hostlist."));
    }
    env.master_addr = *std::move(first);
    break;
  }
  // MASTER_ADDR / MASTER_PORT exported in the batch script win over the derived values.
  VISION_RETURN_IF_ERROR(ReadCommon(getenv, kSrunSetsIt, env));
  if (env.world_size > 1 && !Lookup(getenv, "MASTER_ADDR").has_value() &&
      !Lookup(getenv, "SLURM_JOB_NODELIST").has_value() &&
      !Lookup(getenv, "SLURM_NODELIST").has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MASTER_ADDR is not set and neither is SLURM_JOB_NODELIST or SLURM_NODELIST, but "
        "SLURM_NTASKS=",
        env.world_size,
        " (sbatch/salloc set the node list); export "
        "MASTER_ADDR as the host of rank 0."));
  }
  return env;
}

}  // namespace

absl::string_view EnvSourceName(EnvSource source) {
  switch (source) {
    case EnvSource::kTorchrun:
      return "torchrun";
    case EnvSource::kSlurm:
      return "slurm";
    case EnvSource::kSingleProcess:
      return "single process";
  }
  return "unknown";
}

absl::StatusOr<DistributedEnv> ReadDistributedEnv(
    const std::function<const char*(const char*)>& getenv) {
  if (Lookup(getenv, "RANK").has_value() || Lookup(getenv, "WORLD_SIZE").has_value()) {
    return ReadTorchrun(getenv);
  }
  if (Lookup(getenv, "SLURM_PROCID").has_value()) return ReadSlurm(getenv);
  DistributedEnv env;
  VISION_RETURN_IF_ERROR(ReadCommon(getenv, kTorchrunSetsIt, env));
  return env;
}

absl::StatusOr<std::string> FirstHostOfHostlist(absl::string_view hostlist) {
  std::string host;
  size_t i = 0;
  while (i < hostlist.size() && hostlist[i] != ',') {
    const char c = hostlist[i];
    if (c == ']') {
      return absl::InvalidArgumentError(absl::StrCat("unbalanced ']' at offset ", i, "."));
    }
    if (c != '[') {
      host.push_back(c);
      ++i;
      continue;
    }
    const size_t close = hostlist.find(']', i);
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unbalanced '[' at offset ", i, "."));
    }
    const absl::string_view ranges = hostlist.substr(i + 1, close - i - 1);
    const absl::string_view first_range = ranges.substr(0, ranges.find(','));
    const size_t dash = first_range.find('-');
    const absl::string_view low = first_range.substr(0, dash);
    uint64_t low_value = 0;
    if (!ParseDigits(low, &low_value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'[", ranges, "]' does not start with a number or range like '[01-04,07]'."));
    }
    if (dash != absl::string_view::npos) {
      uint64_t high_value = 0;
      if (!ParseDigits(first_range.substr(dash + 1), &high_value) || high_value < low_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", first_range, "' in '[", ranges, "]' is not a range low-high."));
      }
    }
    host.append(low.data(), low.size());
    i = close + 1;
  }
  if (host.empty()) return absl::InvalidArgumentError("the first host name is empty.");
  return host;
}

absl::StatusOr<std::vector<int>> ParseSlurmTasksPerNode(absl::string_view tasks_per_node) {
  std::vector<int> counts;
  for (absl::string_view item : absl::StrSplit(tasks_per_node, ',')) {
    absl::string_view count_text = item;
    int repeat = 1;
    if (const size_t paren = item.find('('); paren != absl::string_view::npos) {
      count_text = item.substr(0, paren);
      absl::string_view repeat_text = item.substr(paren + 1);
      if (!absl::ConsumePrefix(&repeat_text, "x") || !absl::ConsumeSuffix(&repeat_text, ")") ||
          !absl::SimpleAtoi(repeat_text, &repeat) || repeat < 1 || repeat > kMaxSlurmNodes) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", item, "' is not of the form COUNT or COUNT(xNODES)."));
      }
    }
    int count = 0;
    if (!absl::SimpleAtoi(count_text, &count) || count < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", item, "' does not start with a positive task count."));
    }
    counts.insert(counts.end(), repeat, count);
  }
  return counts;
}

}  // namespace vision::distributed::env
