// The data policy on orphans (README, "Data policies"), shared by the datasets whose images and
// annotations are separate files: a dataset whose files do not pair up is an error naming the
// unpaired files, unless its options allow unpaired files, in which case they are skipped with
// a warning giving their number and the first names.
#ifndef VISION_DATA_DATASETS_COMMON_FILE_PAIRING_H_
#define VISION_DATA_DATASETS_COMMON_FILE_PAIRING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace vision::data::datasets {

// How many names a message lists before "and N more".
inline constexpr int kMaxNamedFiles = 5;

struct UnpairedFiles {
  // Images without their annotation file, and annotation files without their image: paths
  // relative to the listed directory ("aachen/aachen_000000_000019_leftImg8bit.png").
  std::vector<std::string> images;
  std::vector<std::string> annotations;
  bool empty() const { return images.empty() && annotations.empty(); }
};

// Files in a listed directory that are not of the format's naming pattern: ignored by pairing,
// counted with their first names for the summary.
class OtherFiles {
 public:
  // `name` relative to the listed directory.
  void Add(std::string name);
  int64_t count() const { return count_; }
  // "2 other files ignored (readme.txt, Thumbs.db)"; empty when there were none.
  std::string Describe() const;

 private:
  int64_t count_ = 0;
  std::vector<std::string> first_;  // at most kMaxNamedFiles
};

// "3 images in '<image_dir>' have no <annotation> in '<annotation_dir>' (img_3.jpg, ...); 1
// <annotation> in ... has no image in ... (gt_img_9.txt)". Empty when everything pairs up.
std::string DescribeUnpaired(const UnpairedFiles& unpaired, absl::string_view annotation,
                             absl::string_view image_dir, absl::string_view annotation_dir);

// The policy. `format` prefixes the message ("ICDAR2015"), `allow_option` names the option
// that allows unpaired files ("ICDAR2015Options.allow_unpaired_files"). Returns
// FailedPrecondition naming the files unless `allow`; with `allow`, writes the same text as a
// warning to stderr, sets *warning to a short summary for Describe() and returns OK.
absl::Status ApplyPairingPolicy(absl::string_view format, const UnpairedFiles& unpaired,
                                absl::string_view annotation, absl::string_view image_dir,
                                absl::string_view annotation_dir, absl::string_view allow_option,
                                bool allow, std::string* warning);

}  // namespace vision::data::datasets

#endif  // VISION_DATA_DATASETS_COMMON_FILE_PAIRING_H_
