#include "core/atomic_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vision::core {
namespace {

namespace fs = std::filesystem;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " '", path, "': ", std::strerror(errno)));
}

// POSIX calls rather than std::filesystem::remove_all and rename: binaries that link the PyPI
// LibTorch resolve those to libtorch.so's own copies, whose error_code overloads crash here.
// Removes `path` and, for a directory, everything under it; best effort.
void RemoveTree(const fs::path& path) {
  std::error_code error;
  if (fs::is_directory(fs::symlink_status(path, error))) {
    std::vector<fs::path> entries;
    for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
      entries.push_back(it->path());
    }
    for (const fs::path& entry : entries) RemoveTree(entry);
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

// Moves the entries of `from` into the existing directory `to`, merging subdirectories.
absl::Status MergeInto(const fs::path& from, const fs::path& to) {
  std::error_code error;
  for (fs::directory_iterator it(from, error), end; !error && it != end; it.increment(error)) {
    const fs::path target = to / it->path().filename();
    if (it->is_directory(error) && fs::is_directory(target, error)) {
      if (absl::Status status = MergeInto(it->path(), target); !status.ok()) return status;
      continue;
    }
    if (std::rename(it->path().c_str(), target.c_str()) != 0) {
      return ErrnoError(absl::StrCat("cannot move '", it->path().string(), "' to"),
                        target.string());
    }
  }
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot list '", from.string(), "': ", error.message()));
  }
  return FsyncPath(to.string(), /*directory=*/true);
}

}  // namespace

absl::Status FsyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return ErrnoError("cannot open for fsync", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync failed for", path);
  return absl::OkStatus();
}

absl::Status RenameDurably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoError(absl::StrCat("cannot rename '", from, "' to"), to);
  }
  const fs::path parent = fs::path(to).parent_path();
  return FsyncPath(parent.empty() ? "." : parent.string(), /*directory=*/true);
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string partial = absl::StrCat(path, ".partial-", ::getpid());
  std::FILE* file = std::fopen(partial.c_str(), "wb");
  if (file == nullptr) return ErrnoError("cannot create", partial);
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  int error = ok ? 0 : errno;
  if (std::fclose(file) != 0 && ok) {
    ok = false;
    error = errno;
  }
  absl::Status status;
  if (!ok) {
    errno = error;
    status = ErrnoError("cannot write", partial);
  }
  if (status.ok()) status = FsyncPath(partial, /*directory=*/false);
  if (status.ok()) status = RenameDurably(partial, path);
  if (!status.ok()) std::remove(partial.c_str());
  return status;
}

absl::StatusOr<std::unique_ptr<StagedDirectory>> StagedDirectory::Create(
    const std::string& final_dir) {
  fs::path final_path = fs::path(final_dir).lexically_normal();
  if (final_path.has_filename() == false) final_path = final_path.parent_path();  // "out/"
  std::error_code error;
  if (fs::exists(final_path, error) && !fs::is_directory(final_path, error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("output directory '", final_dir, "' exists and is not a directory"));
  }
  if (final_path.has_parent_path()) {
    fs::create_directories(final_path.parent_path(), error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot create '", final_path.parent_path().string(),
                                              "': ", error.message()));
    }
  }
  const std::string partial = absl::StrFormat("%s.partial-%d-%08x", final_path.string(), ::getpid(),
                                              std::random_device()());
  if (::mkdir(partial.c_str(), 0777) != 0) {
    return ErrnoError("cannot create the output directory", partial);
  }
  return std::unique_ptr<StagedDirectory>(new StagedDirectory(final_path.string(), partial));
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  RemoveTree(partial_);
}

absl::Status StagedDirectory::Commit() {
  std::error_code error;
  // Nothing was there: the whole directory appears at once. Another process (rank) may create
  // it between the check and the rename; then the rename fails and the files are merged.
  if (!fs::exists(final_, error) && RenameDurably(partial_, final_).ok()) {
    committed_ = true;
    return absl::OkStatus();
  }
  if (absl::Status status = MergeInto(partial_, final_); !status.ok()) return status;
  RemoveTree(partial_);
  committed_ = true;
  return absl::OkStatus();
}

}  // namespace vision::core
