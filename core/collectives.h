// What the engine needs from the process group, behind an interface so the loop is the same
// for one process and for many (distributed/process_group implements it on c10d).
// Every call is a collective: all ranks must make it, in the same order.
#ifndef VISION_CORE_COLLECTIVES_H_
#define VISION_CORE_COLLECTIVES_H_

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace vision::core {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Sums each tensor over ranks, in place.
  virtual absl::Status AllReduceSum(std::vector<at::Tensor>& tensors) = 0;
  // Copies rank `root`'s values into every rank's tensors, in place.
  virtual absl::Status Broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
  // Every rank's string, indexed by rank, on every rank.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(const std::string& value) = 0;
  virtual absl::Status Barrier() = 0;
  // The underlying group for communication strategies; null for a single process.
  virtual c10::intrusive_ptr<c10d::ProcessGroup> group() const = 0;
};

// A job of one process: every collective is the identity.
class SingleProcess : public Collectives {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduceSum(std::vector<at::Tensor>&) override { return absl::OkStatus(); }
  absl::Status Broadcast(std::vector<at::Tensor>&, int) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& value) override {
    return std::vector<std::string>{value};
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  c10::intrusive_ptr<c10d::ProcessGroup> group() const override;
};

}  // namespace vision::core

#endif  // VISION_CORE_COLLECTIVES_H_
