#include "distributed/shm/shm_backend.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "distributed/shm/segment_name.h"

namespace vision::distributed::shm {
namespace {

constexpr uint64_t kMagic = 0x316d68732d736976;  // "vis-shm1"
constexpr int kMaxLocalRanks = 256;
// Slot sets: chunk c uses set c % kSets (see AllReduce).
constexpr int kSets = 3;
// Each rank's share of a chunk starts on a 64-byte boundary (16 floats): no two ranks write
// the same cache line.
constexpr int64_t kShareAlignBytes = 64;
// Pause-loop iterations before a barrier waits on the futex. The first barrier of a collective
// waits for the peers to reach it, which in an overlapped backward they may do milliseconds
// later (they are still computing): spinning there takes a core from their computation, so it
// spins briefly. The barriers between chunks wait for peers that are already in the collective
// and arrive within microseconds: they spin longer before sleeping. Against the former policy
// (4,000 iterations, then 64 yields, at every barrier), interleaved on the idle 2-core machine
// (comm_benchmark, bucketed over shm, world 2): the same step time (new/old 1.006 for the small
// net over 12 rounds, 1.010 for ResNet-18 over 6) and less CPU added per step (1.75 -> 1.40 ms,
// 19.0 -> 14.6 ms).
constexpr int kArrivalSpins = 200;
constexpr int kChunkSpins = 4000;
constexpr int64_t kFutexSliceNs = 10'000'000;  // Liveness and deadline checks every 10 ms.

// One barrier counter per local rank, each on its own cache line.
struct alignas(64) Counter {
  std::atomic<uint32_t> value;
};
static_assert(sizeof(Counter) == 64, "one counter per cache line");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex needs a plain 32-bit word");

struct Header {
  uint64_t magic;
  uint64_t nonce;
  int64_t local_world_size;
  int64_t slot_bytes;
  Counter arrived[kMaxLocalRanks];
};

constexpr int64_t kDataOffset = (sizeof(Header) + 4095) / 4096 * 4096;

// Slots small enough that a node's slots (6 MiB up to 32 local ranks) stay in the last-level
// cache between a rank writing them and its peers reading them: the chunks then move at cache
// speed, and only the tensors themselves cross the memory bus.
int64_t DefaultSlotBytes(int local_world_size) {
  return std::clamp<int64_t>((int64_t{2} << 20) / local_world_size, int64_t{64} << 10,
                             int64_t{1} << 20);
}

bool Reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  timespec slice{0, kFutexSliceNs};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &slice, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Byte `local_rank` of the segment file carries an open-file-description lock held by that
// rank for as long as it has the segment open: the kernel drops it when the process dies,
// whatever the signal, so a peer's death is seen without PIDs (which containers may hide).
bool LockLiveness(int fd, int local_rank) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = local_rank;
  lock.l_len = 1;
  return fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

bool IsAlive(int fd, int local_rank) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = local_rank;
  lock.l_len = 1;
  if (fcntl(fd, F_OFD_GETLK, &lock) != 0) return true;  // Unknown: rely on the timeout.
  return lock.l_type != F_UNLCK;
}

std::string Errno(const char* call) { return absl::StrCat(call, ": ", std::strerror(errno)); }

// Completes like Gloo's work: wait() returns, and its future (which callers such as the
// gradient reducer's timeline attach callbacks to) completes with the tensors or the error.
class ShmWork : public c10d::Work {
 public:
  explicit ShmWork(int rank, std::vector<at::Tensor> tensors)
      : c10d::Work(rank, c10d::OpType::ALLREDUCE, "shm:all_reduce"),
        tensors_(std::move(tensors)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}
  // The future's callbacks run before wait() returns (a timeline's all-reduce span then ends
  // before the wait does).
  void Finish(std::exception_ptr error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(tensors_));
    }
    finish(std::move(error));
  }
  std::vector<at::Tensor> result() override { return tensors_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> tensors_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ShmBackend : public c10d::Backend {
 public:
  ShmBackend(const ShmBackendOptions& options, int local_world_size,
             c10::intrusive_ptr<c10d::Backend> gloo)
      : c10d::Backend(options.rank, options.world_size),
        options_(options),
        local_world_size_(local_world_size),
        local_rank_(options.rank % local_world_size),
        node_(options.rank / local_world_size),
        gloo_(std::move(gloo)) {}

  ~ShmBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (base_ != nullptr) munmap(base_, mapped_bytes_);
    if (fd_ >= 0) close(fd_);
  }

  // Collective: creates (local rank 0) or opens the node's segment, then unlinks it.
  absl::Status Setup(c10d::Store& store, c10::intrusive_ptr<c10d::Backend> cross) {
    cross_ = std::move(cross);
    if (local_world_size_ > 1) {
      slot_bytes_ =
          options_.slot_bytes > 0 ? options_.slot_bytes : DefaultSlotBytes(local_world_size_);
      slot_bytes_ = slot_bytes_ / kShareAlignBytes * kShareAlignBytes;
      mapped_bytes_ = kDataOffset + kSets * local_world_size_ * slot_bytes_;
      absl::Status status = local_rank_ == 0 ? CreateSegment(store) : OpenSegment(store);
      if (!status.ok()) return status;
    }
    worker_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  const std::string getBackendName() const override { return kShmBackendName; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (!Eligible(tensors, opts)) return gloo_->allreduce(tensors, opts);
    auto work = c10::make_intrusive<ShmWork>(getRank(), tensors);
    if (tensors[0].numel() == 0) {
      work->Finish(nullptr);
      return work;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({tensors[0], opts.reduceOp == c10d::ReduceOp::AVG, work});
    }
    wake_.notify_one();
    return work;
  }

  // Everything else is Gloo's.
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    return gloo_->broadcast(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return gloo_->allreduce_coalesced(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    return gloo_->reduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    return gloo_->allgather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return gloo_->_allgather_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    return gloo_->allgather_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    return gloo_->allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    return gloo_->gather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    return gloo_->scatter(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return gloo_->reduce_scatter(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    return gloo_->_reduce_scatter_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    return gloo_->alltoall_base(output, input, output_splits, input_splits, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    return gloo_->alltoall(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    return gloo_->send(tensors, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    return gloo_->recv(tensors, src, tag);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return gloo_->recvAnysource(tensors, tag);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return gloo_->barrier(opts);
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    gloo_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override { gloo_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return gloo_->getSequenceNumberForGroup(); }
  void setTimeout(std::chrono::milliseconds timeout) override {
    options_.timeout = timeout;
    gloo_->setTimeout(timeout);
    if (cross_) cross_->setTimeout(timeout);
  }

 private:
  static bool IsSummable(at::ScalarType type) {
    return type == at::kFloat || type == at::kDouble || type == at::kHalf || type == at::kBFloat16;
  }

  // SUM, and AVG (which Gloo does not have): the sum divided by the world size in the same
  // pass, while the reduced share is still in cache, instead of a pass over the whole tensor
  // before or after.
  bool Eligible(const std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) const {
    const bool average = opts.reduceOp == c10d::ReduceOp::AVG;
    if (tensors.size() != 1 || (opts.reduceOp != c10d::ReduceOp::SUM && !average)) return false;
    const at::Tensor& t = tensors[0];
    if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided || !t.is_contiguous() ||
        !IsSummable(t.scalar_type())) {
      return false;
    }
    // With one rank per node only half and bfloat16 sums need this backend (summed in float);
    // Gloo takes the other sums directly.
    return local_world_size_ > 1 || average || t.scalar_type() == at::kHalf ||
           t.scalar_type() == at::kBFloat16;
  }

  std::string Where() const {
    return absl::StrCat("rank ", getRank(), " (node ", node_, ", local rank ", local_rank_, ")");
  }

  std::string SpaceError(int64_t available) const {
    return absl::StrCat("shm backend on ", Where(), ": shared memory too small: need ",
                        (mapped_bytes_ + (1 << 20) - 1) >> 20, " MB in ", kShmDirectory, ", have ",
                        available >> 20,
                        " MB free. Enlarge it (Docker: --shm-size=1g; Kubernetes: an emptyDir "
                        "with medium Memory at /dev/shm) or use backend GLOO");
  }

  absl::Status CreateSegment(c10d::Store& store) {
    const std::string name = SegmentName(options_.master_port, options_.restart_count, node_);
    struct statvfs fs {};
    if (statvfs(kShmDirectory, &fs) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("shm backend on ", Where(), ": ", kShmDirectory, " is not usable (",
                       Errno("statvfs"), "); mount a tmpfs there or use backend GLOO"));
    }
    const int64_t available = static_cast<int64_t>(fs.f_bavail) * fs.f_frsize;
    if (available < mapped_bytes_) return absl::ResourceExhaustedError(SpaceError(available));
    fd_ = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0 && errno == EEXIST) {
      // Left by an attempt of this job killed between creating and unlinking it.
      shm_unlink(name.c_str());
      fd_ = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd_ < 0) {
      return absl::FailedPreconditionError(absl::StrCat("shm backend on ", Where(),
                                                        ": cannot create ", kShmDirectory, name,
                                                        " (", Errno("shm_open"), ")"));
    }
    absl::Status status = InitSegment(name, available);
    if (status.ok()) status = Publish(store);
    // Whatever happened, no name stays behind: the mappings keep the memory alive.
    shm_unlink(name.c_str());
    if (!status.ok()) return status;
    try {
      store.set(Key("unlinked"), std::string("1"));
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("shm backend on ", Where(), ": rendezvous store: ", e.what()));
    }
    return absl::OkStatus();
  }

  absl::Status InitSegment(const std::string& name, int64_t available) {
    if (ftruncate(fd_, mapped_bytes_) != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat(SpaceError(available), " (", Errno("ftruncate"), ")"));
    }
    // Reserve the pages now: a tmpfs that fills up later would kill us with SIGBUS mid-step.
    const int error = posix_fallocate(fd_, 0, mapped_bytes_);
    if (error != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat(SpaceError(available), " (posix_fallocate: ", std::strerror(error), ")"));
    }
    if (!Map()) {
      return absl::InternalError(
          absl::StrCat("shm backend on ", Where(), ": ", Errno("mmap"), " of ", name));
    }
    std::random_device random;
    header_->nonce = (static_cast<uint64_t>(random()) << 32) ^ random() ^ getpid();
    header_->local_world_size = local_world_size_;
    header_->slot_bytes = slot_bytes_;
    for (Counter& counter : header_->arrived) counter.value.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    header_->magic = kMagic;
    if (!LockLiveness(fd_, local_rank_)) {
      return absl::InternalError(
          absl::StrCat("shm backend on ", Where(), ": ", Errno("fcntl(F_OFD_SETLK)")));
    }
    return absl::OkStatus();
  }

  std::string Key(const std::string& what) const {
    return absl::StrCat("vision/shm/", options_.restart_count, "/", node_, "/", what);
  }

  // Announces the segment (by its nonce) and waits until every local rank mapped it.
  absl::Status Publish(c10d::Store& store) {
    try {
      store.set(Key("ready"), absl::StrCat(header_->nonce));
      std::vector<std::string> keys;
      for (int r = 1; r < local_world_size_; ++r) keys.push_back(Key(absl::StrCat("opened/", r)));
      store.wait(keys, options_.timeout);
    } catch (const std::exception& e) {
      return absl::DeadlineExceededError(
          absl::StrCat("shm backend on ", Where(),
                       ": not every local rank opened the shared-memory segment "
                       "within ",
                       options_.timeout.count(), " ms: ", e.what()));
    }
    return absl::OkStatus();
  }

  absl::Status OpenSegment(c10d::Store& store) {
    const std::string name = SegmentName(options_.master_port, options_.restart_count, node_);
    std::string nonce;
    try {
      store.wait({Key("ready")}, options_.timeout);
      const std::vector<uint8_t> bytes = store.get(Key("ready"));
      nonce.assign(bytes.begin(), bytes.end());
    } catch (const std::exception& e) {
      return absl::DeadlineExceededError(absl::StrCat(
          "shm backend on ", Where(), ": local rank 0 of node ", node_,
          " did not create the shared-memory segment within ", options_.timeout.count(),
          " ms (look at its log: /dev/shm may be too small): ", e.what()));
    }
    fd_ = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("shm backend on ", Where(), ": cannot open ", kShmDirectory, name, " (",
                       Errno("shm_open"),
                       "); all local ranks of a node must share /dev/shm (same host, same "
                       "IPC namespace)"));
    }
    struct stat info {};
    if (fstat(fd_, &info) != 0 || info.st_size != mapped_bytes_ || !Map() ||
        header_->magic != kMagic || absl::StrCat(header_->nonce) != nonce ||
        header_->local_world_size != local_world_size_ || header_->slot_bytes != slot_bytes_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shm backend on ", Where(), ": ", kShmDirectory, name,
          " is not the segment local rank 0 created for this job (another job on the same "
          "MASTER_PORT, or ranks with different LOCAL_WORLD_SIZE?)"));
    }
    if (!LockLiveness(fd_, local_rank_)) {
      return absl::InternalError(
          absl::StrCat("shm backend on ", Where(), ": ", Errno("fcntl(F_OFD_SETLK)")));
    }
    try {
      store.set(Key(absl::StrCat("opened/", local_rank_)), std::string("1"));
      // Return only once the name is gone: from then on no rank's death can leave a file.
      store.wait({Key("unlinked")}, options_.timeout);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("shm backend on ", Where(), ": rendezvous store: ", e.what()));
    }
    return absl::OkStatus();
  }

  bool Map() {
    void* base = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED) return false;
    base_ = static_cast<char*>(base);
    header_ = reinterpret_cast<Header*>(base_);
    return true;
  }

  char* Slot(int set, int local_rank) const {
    return base_ + kDataOffset + (set * local_world_size_ + local_rank) * slot_bytes_;
  }

  void Loop() {
    at::NoGradGuard no_grad;
    while (true) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      if (!failure_.empty()) {
        error = std::make_exception_ptr(std::runtime_error(absl::StrCat(
            "shm all-reduce on ", Where(), " refused: an earlier one failed: ", failure_)));
      } else {
        try {
          AllReduce(item.tensor, item.average);
        } catch (const std::exception& e) {
          failure_ = e.what();
          error = std::current_exception();
        }
      }
      item.work->Finish(error);
    }
  }

  // average: divide the sum by the world size (ReduceOp::AVG).
  void AllReduce(const at::Tensor& tensor, bool average) {
    if (local_world_size_ == 1) {
      // One rank per node: sum through Gloo (half and bfloat16 in float), then average.
      const bool narrow =
          tensor.scalar_type() == at::kHalf || tensor.scalar_type() == at::kBFloat16;
      at::Tensor wide = narrow ? tensor.to(at::kFloat) : tensor;
      std::vector<at::Tensor> one = {wide};
      gloo_->allreduce(one)->wait();
      if (average) wide.div_(getSize());
      if (narrow) tensor.copy_(wide);
      return;
    }
    // Chunk c lives in slot set c % kSets. One barrier per chunk: the barrier after chunk c's
    // reduction is also the one before chunk c + 1's, since every rank copies chunk c + 1 in
    // before arriving. A set is rewritten three chunks later, when every rank has passed the
    // barrier that follows its copy-out of the chunk before.
    const int64_t element = tensor.element_size();
    const int64_t total = tensor.numel();
    const int64_t chunk = slot_bytes_ / element;
    const int64_t chunks = (total + chunk - 1) / chunk;
    char* data = static_cast<char*>(tensor.data_ptr());
    const uint64_t first = round_;
    round_ += chunks;
    auto copy_in = [&](int64_t c) {
      const int64_t offset = c * chunk;
      std::memcpy(Slot(static_cast<int>((first + c) % kSets), local_rank_), data + offset * element,
                  std::min(chunk, total - offset) * element);
    };
    copy_in(0);
    Barrier(kArrivalSpins);
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t offset = c * chunk;
      const int64_t count = std::min(chunk, total - offset);
      const int set = static_cast<int>((first + c) % kSets);
      // This rank's share of the chunk, cache-line aligned.
      const int64_t align = kShareAlignBytes / element;
      const int64_t share = (count + local_world_size_ - 1) / local_world_size_;
      const int64_t per = (share + align - 1) / align * align;
      const int64_t begin = std::min(count, local_rank_ * per);
      const int64_t end = std::min(count, begin + per);
      if (end > begin) ReduceShare(set, tensor.scalar_type(), begin, end, average);
      if (c + 1 < chunks) copy_in(c + 1);
      Barrier(kChunkSpins);
      std::memcpy(data + offset * element, Slot(set, 0), count * element);
    }
  }

  // Sums elements [begin, end) of every local rank's slot into slot 0, in local-rank order,
  // then across nodes; for AVG divides the sum by the world size.
  void ReduceShare(int set, at::ScalarType type, int64_t begin, int64_t end, bool average) {
    const int64_t element = c10::elementSize(type);
    auto slot = [&](int r) {
      return at::from_blob(Slot(set, r) + begin * element, {end - begin},
                           at::TensorOptions().dtype(type));
    };
    at::Tensor out = slot(0);
    if (type == at::kFloat || type == at::kDouble) {
      for (int r = 1; r < local_world_size_; ++r) out.add_(slot(r));
      if (cross_) {
        std::vector<at::Tensor> one = {out};
        cross_->allreduce(one)->wait();
      }
      if (average) out.div_(getSize());
      return;
    }
    at::Tensor sum = out.to(at::kFloat);
    for (int r = 1; r < local_world_size_; ++r) sum.add_(slot(r));
    if (cross_) {
      std::vector<at::Tensor> one = {sum};
      cross_->allreduce(one)->wait();
    }
    if (average) sum.div_(getSize());
    out.copy_(sum);
  }

  void Barrier(int spins) {
    const uint32_t target = ++sequence_;
    std::atomic<uint32_t>& mine = header_->arrived[local_rank_].value;
    mine.store(target, std::memory_order_release);
    FutexWakeAll(&mine);
    for (int r = 0; r < local_world_size_; ++r) {
      if (r != local_rank_) WaitFor(r, target, spins);
    }
  }

  void WaitFor(int r, uint32_t target, int spins) {
    std::atomic<uint32_t>& word = header_->arrived[r].value;
    for (int i = 0; i < spins; ++i) {
      if (Reached(word.load(std::memory_order_acquire), target)) return;
      CpuRelax();
    }
    // Then sleep: the peer's arrival wakes us (FutexWakeAll in Barrier). Yielding instead left
    // the wait to the scheduler: with the cores busy, a yield can cost a time slice.
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (true) {
      const uint32_t seen = word.load(std::memory_order_acquire);
      if (Reached(seen, target)) return;
      FutexWait(&word, seen);
      if (Reached(word.load(std::memory_order_acquire), target)) return;
      const int global = node_ * local_world_size_ + r;
      if (!IsAlive(fd_, r)) {
        throw std::runtime_error(
            absl::StrCat("shm all-reduce on ", Where(), ": local rank ", r, " (rank ", global,
                         ") exited in the middle of a collective; see its log"));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error(absl::StrCat("shm all-reduce on ", Where(), ": local rank ", r,
                                              " (rank ", global, ") did not arrive within ",
                                              options_.timeout.count(),
                                              " ms (stalled, or issuing different collectives)"));
      }
    }
  }

  ShmBackendOptions options_;
  const int local_world_size_;
  const int local_rank_;
  const int node_;
  c10::intrusive_ptr<c10d::Backend> gloo_;
  c10::intrusive_ptr<c10d::Backend> cross_;  // Same local rank on every node; null on one node.

  int fd_ = -1;
  char* base_ = nullptr;
  Header* header_ = nullptr;
  int64_t slot_bytes_ = 0;
  int64_t mapped_bytes_ = 0;

  // Used by the worker thread only.
  uint32_t sequence_ = 0;
  uint64_t round_ = 0;  // Chunks reduced so far.
  std::string failure_;

  std::mutex mutex_;
  std::condition_variable wake_;
  struct Item {
    at::Tensor tensor;
    bool average = false;
    c10::intrusive_ptr<ShmWork> work;
  };
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateShmBackend(
    const c10::intrusive_ptr<c10d::Store>& store, const ShmBackendOptions& options,
    c10::intrusive_ptr<c10d::Backend> gloo, const GlooFactory& make_gloo) {
  const int local = options.local_world_size > 0 ? options.local_world_size : options.world_size;
  if (local > kMaxLocalRanks || options.world_size % local != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm backend: ", local, " ranks per node for a world of ", options.world_size,
                     ": every node must run the same number of ranks (at most ", kMaxLocalRanks,
                     "); check LOCAL_WORLD_SIZE and WORLD_SIZE or use backend GLOO"));
  }
  ShmBackendOptions resolved = options;
  if (const char* kb = std::getenv(kSlotKbVariable); resolved.slot_bytes <= 0 && kb != nullptr) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(kb, &value) || value < 1 || value > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kSlotKbVariable, "='", kb, "' is not a slot size in KiB (1 or more)"));
    }
    resolved.slot_bytes = value << 10;
  }
  auto backend = c10::make_intrusive<ShmBackend>(resolved, local, std::move(gloo));
  const int nodes = options.world_size / local;
  c10::intrusive_ptr<c10d::Backend> cross;
  if (nodes > 1 && local > 1) {
    try {
      cross =
          make_gloo(absl::StrCat("shm/", options.restart_count, "/cross/", options.rank % local),
                    options.rank / local, nodes);
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("shm backend on rank ", options.rank,
                       ": creating the cross-node Gloo group failed: ", e.what()));
    }
  }
  absl::Status status = backend->Setup(*store, std::move(cross));
  if (!status.ok()) return status;
  return c10::intrusive_ptr<c10d::Backend>(std::move(backend));
}

}  // namespace vision::distributed::shm
