#include "core/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vision::core {
namespace {

constexpr char kUnknownPluginPayload[] = "vision.core.UnknownPlugin";

}  // namespace

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = absl::ascii_tolower(a[i - 1]) == absl::ascii_tolower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace internal {

void DieOnDuplicate(absl::string_view family, absl::string_view name, absl::string_view first_site,
                    absl::string_view second_site) {
  std::fprintf(stderr,
               "FATAL: duplicate %.*s plugin name '%.*s': registered at %.*s and again at %.*s. "
               "Rename one of them.\n",
               static_cast<int>(family.size()), family.data(), static_cast<int>(name.size()),
               name.data(), static_cast<int>(first_site.size()), first_site.data(),
               static_cast<int>(second_site.size()), second_site.data());
  std::abort();
}

absl::Status UnknownName(absl::string_view family, absl::string_view name,
                         const std::vector<std::string>& registered) {
  std::string best;
  int best_distance = 0;
  for (const std::string& candidate : registered) {
    const int d = EditDistance(name, candidate);
    if (best.empty() || d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  // A near miss: at most a third of the name's letters differ.
  const int tolerance = std::max<int>(1, static_cast<int>(name.size()) / 3);
  std::string hint;
  if (!best.empty() && best_distance <= tolerance) hint = absl::StrCat("; did you mean '", best, "'?");
  absl::Status status = absl::NotFoundError(absl::StrCat(
      "Unknown ", family, " '", name, "'", hint, " Registered ", family, " plugins: ",
      registered.empty() ? std::string("(none)") : absl::StrJoin(registered, ", "),
      ". A plugin is only registered when its library is linked: check the binary's plugin "
      "bundle."));
  // Family and name cannot contain a newline: they are C++ identifiers and quoted config names.
  status.SetPayload(kUnknownPluginPayload, absl::Cord(absl::StrCat(family, "\n", name)));
  return status;
}

}  // namespace internal

std::optional<UnknownPlugin> UnknownPluginOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kUnknownPluginPayload);
  if (!payload.has_value()) return std::nullopt;
  const std::string text(*payload);
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  return UnknownPlugin{text.substr(0, newline), text.substr(newline + 1)};
}
}  // namespace vision::core
