#include "distributed/strategies/strategies.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace vision::distributed::strategies {
namespace {

absl::StatusOr<ReducerOptions> BucketedReducerOptions(const BucketedOptions& options,
                                                      Compression compression) {
  if (!(options.bucket_cap_mb() > 0) || !std::isfinite(options.bucket_cap_mb())) {
    return absl::InvalidArgumentError(
        absl::StrCat("BucketedOptions.bucket_cap_mb must be a positive number of MiB, got ",
                     options.bucket_cap_mb(), " (DDP's default is 25)"));
  }
  ReducerOptions reducer;
  reducer.bucket_cap_bytes = static_cast<int64_t>(options.bucket_cap_mb() * 1024 * 1024);
  reducer.overlap = true;
  reducer.compression = compression;
  reducer.find_unused_parameters = options.find_unused_parameters();
  reducer.communicate_at_world_one = options.communicate_at_world_one();
  return reducer;
}

template <typename Strategy>
absl::StatusOr<std::unique_ptr<Strategy>> MakeBucketed(const BucketedOptions& options,
                                                       Compression compression) {
  VISION_ASSIGN_OR_RETURN(const ReducerOptions reducer,
                          BucketedReducerOptions(options, compression));
  return std::make_unique<Strategy>(reducer);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AllReduceStrategy>> AllReduceStrategy::Create(
    const AllReduceOptions& options) {
  ReducerOptions reducer;
  reducer.find_unused_parameters = options.find_unused_parameters();
  return std::make_unique<AllReduceStrategy>(reducer);
}

absl::StatusOr<std::unique_ptr<BucketedStrategy>> BucketedStrategy::Create(
    const BucketedOptions& options) {
  return MakeBucketed<BucketedStrategy>(options, Compression::kNone);
}

absl::StatusOr<std::unique_ptr<Fp16CompressStrategy>> Fp16CompressStrategy::Create(
    const BucketedOptions& options) {
  return MakeBucketed<Fp16CompressStrategy>(options, Compression::kFloat16);
}

absl::StatusOr<std::unique_ptr<Bf16CompressStrategy>> Bf16CompressStrategy::Create(
    const BucketedOptions& options) {
  return MakeBucketed<Bf16CompressStrategy>(options, Compression::kBFloat16);
}

VISION_REGISTER_PLUGIN(core::CommStrategyRegistry, "allreduce", AllReduceStrategy,
                       AllReduceOptions);
VISION_REGISTER_PLUGIN(core::CommStrategyRegistry, "bucketed", BucketedStrategy, BucketedOptions);
VISION_REGISTER_PLUGIN(core::CommStrategyRegistry, "fp16_compress", Fp16CompressStrategy,
                       BucketedOptions);
VISION_REGISTER_PLUGIN(core::CommStrategyRegistry, "bf16_compress", Bf16CompressStrategy,
                       BucketedOptions);

}  // namespace vision::distributed::strategies
