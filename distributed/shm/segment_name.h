// Names of the shared-memory segments of the "shm" backend, in a header of their own so the
// launcher can remove a job's stale segments without linking LibTorch.
#ifndef VISION_DISTRIBUTED_SHM_SEGMENT_NAME_H_
#define VISION_DISTRIBUTED_SHM_SEGMENT_NAME_H_

#include <string>

namespace vision::distributed::shm {

// Directory where POSIX shm_open places its objects on Linux.
inline constexpr char kShmDirectory[] = "/dev/shm";

// Prefix of every segment of the job whose rendezvous is on `master_port`, e.g.
// "vision-shm-29500-" (a file name under kShmDirectory, without the leading slash).
std::string JobSegmentPrefix(int master_port);

// The segment of node `node` in attempt `restart_count` of that job, as shm_open takes it:
// "/vision-shm-29500-0-1".
std::string SegmentName(int master_port, int restart_count, int node);

// Removes every segment of the job on this host (normally none: each is unlinked as soon as
// all local ranks mapped it; one remains only when a rank died in that short window). Returns
// how many were removed.
int RemoveJobSegments(int master_port);

}  // namespace vision::distributed::shm

#endif  // VISION_DISTRIBUTED_SHM_SEGMENT_NAME_H_
