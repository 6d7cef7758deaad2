#include "data/datasets/common/file_pairing.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vision::data::datasets {
namespace {

std::string FirstNames(const std::vector<std::string>& names) {
  const size_t shown = std::min<size_t>(names.size(), kMaxNamedFiles);
  std::string text = absl::StrJoin(names.begin(), names.begin() + shown, ", ");
  if (names.size() > shown) absl::StrAppend(&text, ", and ", names.size() - shown, " more");
  return text;
}

}  // namespace

void OtherFiles::Add(std::string name) {
  ++count_;
  if (first_.size() < static_cast<size_t>(kMaxNamedFiles)) first_.push_back(std::move(name));
}

std::string OtherFiles::Describe() const {
  if (count_ == 0) return "";
  std::string text = absl::StrCat(count_, count_ == 1 ? " other file" : " other files",
                                  " ignored (", absl::StrJoin(first_, ", "));
  if (count_ > static_cast<int64_t>(first_.size())) {
    absl::StrAppend(&text, ", and ", count_ - static_cast<int64_t>(first_.size()), " more");
  }
  return absl::StrCat(text, ")");
}

std::string DescribeUnpaired(const UnpairedFiles& unpaired, absl::string_view annotation,
                             absl::string_view image_dir, absl::string_view annotation_dir) {
  std::vector<std::string> parts;
  if (!unpaired.images.empty()) {
    const bool one = unpaired.images.size() == 1;
    parts.push_back(absl::StrCat(unpaired.images.size(), one ? " image" : " images", " in '",
                                 image_dir, "' ", one ? "has" : "have", " no ", annotation, " in '",
                                 annotation_dir, "' (", FirstNames(unpaired.images), ")"));
  }
  if (!unpaired.annotations.empty()) {
    const bool one = unpaired.annotations.size() == 1;
    parts.push_back(absl::StrCat(unpaired.annotations.size(), " ", annotation,
                                 one ? " file" : " files", " in '", annotation_dir, "' ",
                                 one ? "has" : "have", " no image in '", image_dir, "' (",
                                 FirstNames(unpaired.annotations), ")"));
  }
  return absl::StrJoin(parts, "; ");
}

absl::Status ApplyPairingPolicy(absl::string_view format, const UnpairedFiles& unpaired,
                                absl::string_view annotation, absl::string_view image_dir,
                                absl::string_view annotation_dir, absl::string_view allow_option,
                                bool allow, std::string* warning) {
  warning->clear();
  if (unpaired.empty()) return absl::OkStatus();
  const std::string what = DescribeUnpaired(unpaired, annotation, image_dir, annotation_dir);
  if (!allow) {
    return absl::FailedPreconditionError(
        absl::StrCat(format, ": the images and ", annotation, " files do not pair up: ", what,
                     ". Restore the missing files or remove the extra ones, or set ", allow_option,
                     ": true to skip unpaired files with a warning"));
  }
  std::fprintf(stderr, "warning: %s: skipping unpaired files (%s: true): %s\n",
               std::string(format).c_str(), std::string(allow_option).c_str(), what.c_str());
  *warning =
      absl::StrCat("skipped ", unpaired.images.size(), " images without ", annotation, " and ",
                   unpaired.annotations.size(), " ", annotation, " files without image");
  return absl::OkStatus();
}

}  // namespace vision::data::datasets
