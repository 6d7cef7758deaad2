// Fuzzes the COCO annotation reader through its public entry point, CocoDataset::Create (the
// JSON file: images, categories, annotations with polygons, uncompressed and compressed RLE),
// with both empty-image policies and with crowd regions kept and dropped; and checks that
// where the parse cuts the file's lists into windows (coco_index.cc, "Windows") changes
// nothing: the same arrays to the byte, or the same error. coco_index_test covers every window
// size on its inputs.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/datasets/coco/coco.pb.h"
#include "data/datasets/coco/coco_dataset.h"
#include "data/datasets/coco/coco_index.h"
#include "tools/fuzz/fuzz_util.h"

namespace {

template <typename T>
bool SameBytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool SameArrays(const vision::data::datasets::coco::CocoIndexArrays& a,
                const vision::data::datasets::coco::CocoIndexArrays& b) {
  return SameBytes(a.categories, b.categories) && SameBytes(a.images, b.images) &&
         SameBytes(a.annotations, b.annotations) &&
         SameBytes(a.polygon_offsets, b.polygon_offsets) && SameBytes(a.coords, b.coords) &&
         SameBytes(a.rle_counts, b.rle_counts) && a.names == b.names &&
         a.has_annotations == b.has_annotations;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vision;
  using data::datasets::CocoOptions;
  const std::filesystem::path json(fuzz::ScratchPath(".json"));
  fuzz::WriteScratch(json.string(), data, size);
  for (int variant = 0; variant < 2; ++variant) {
    CocoOptions options;
    options.set_root(json.parent_path().string());
    options.set_annotation_file(json.filename().string());
    options.set_image_dir(".");
    options.set_empty_images(variant == 0 ? CocoOptions::SKIP : CocoOptions::KEEP);
    options.set_keep_crowd(variant == 0);
    auto dataset = data::datasets::coco::CocoDataset::Create(options);
    if (!dataset.ok()) {
      VISION_FUZZ_CHECK(!dataset.status().message().empty());
      continue;
    }
    const auto& coco = **dataset;
    VISION_FUZZ_CHECK(coco.Size() >= 0);
    VISION_FUZZ_CHECK(coco.class_names().size() == coco.category_ids().size());
    VISION_FUZZ_CHECK(!coco.Describe().empty());
    VISION_FUZZ_CHECK(coco.Metadata().has_value());
  }
  using data::datasets::coco::ParseCocoJson;
  const auto whole = ParseCocoJson(json.string());
  // One window size per input, 1 to 31 bytes, changing with every insertion or deletion the
  // fuzzer makes (one extra parse per input instead of two).
  const uint64_t window_bytes = 1 + size % 31;
  const auto cut = ParseCocoJson(json.string(), nullptr, window_bytes);
  VISION_FUZZ_CHECK(cut.status() == whole.status());
  VISION_FUZZ_CHECK(!cut.ok() || SameArrays(*cut, *whole));
  return 0;
}
