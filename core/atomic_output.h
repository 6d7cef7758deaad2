// Outputs that are complete or absent, never half-written (README, "Data policies"), for
// checkpoints and for the tools that write a directory of results (inspect_data, eval, infer):
// write under a temporary name, make it durable, rename it into place.
#ifndef VISION_CORE_ATOMIC_OUTPUT_H_
#define VISION_CORE_ATOMIC_OUTPUT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vision::core {

// fsync of a file or a directory (the latter makes a rename in it durable).
absl::Status FsyncPath(const std::string& path, bool directory);

// Renames `from` to `to` (same file system; replaces a file `to`) and fsyncs `to`'s directory.
absl::Status RenameDurably(const std::string& from, const std::string& to);

// Writes `bytes` to `path` complete or not at all: a temporary "<path>.partial-<pid>" beside
// it, fsynced, renamed into place; on any error the temporary is removed and `path` untouched.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes);

// A directory of outputs that appears only when everything in it was written: a tool writes
// into path(), a sibling "<final>.partial-<pid>-<random>" of the final directory, and Commit()
// moves the contents into place. Without Commit() (an error return, an exception) the
// destructor removes the partial directory, so a failed run leaves nothing that looks like a
// result; after a crash the leftover's name says it is partial.
//
// When the final directory does not exist, Commit() renames the partial directory into place
// (atomic). When it exists (a rerun, or another rank of the same run committed first), the
// partial directory's files are renamed into it one by one, replacing files of the same names
// and keeping others, and the partial directory is removed.
class StagedDirectory {
 public:
  static absl::StatusOr<std::unique_ptr<StagedDirectory>> Create(const std::string& final_dir);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // Where to write.
  const std::string& path() const { return partial_; }
  const std::string& final_path() const { return final_; }
  absl::Status Commit();

 private:
  StagedDirectory(std::string final_dir, std::string partial)
      : final_(std::move(final_dir)), partial_(std::move(partial)) {}

  const std::string final_;
  const std::string partial_;
  bool committed_ = false;
};

}  // namespace vision::core

#endif  // VISION_CORE_ATOMIC_OUTPUT_H_
