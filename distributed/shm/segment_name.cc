#include "distributed/shm/segment_name.h"

#include <dirent.h>
#include <sys/mman.h>

#include "absl/strings/str_cat.h"

namespace vision::distributed::shm {

std::string JobSegmentPrefix(int master_port) {
  return absl::StrCat("vision-shm-", master_port, "-");
}

std::string SegmentName(int master_port, int restart_count, int node) {
  return absl::StrCat("/", JobSegmentPrefix(master_port), restart_count, "-", node);
}

int RemoveJobSegments(int master_port) {
  const std::string prefix = JobSegmentPrefix(master_port);
  DIR* dir = opendir(kShmDirectory);
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) == 0 && shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace vision::distributed::shm
