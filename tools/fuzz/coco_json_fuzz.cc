// Fuzzes the COCO annotation reader through its public entry point, CocoDataset::Create (the
// JSON file: images, categories, annotations with polygons, uncompressed and compressed RLE),
// with both empty-image policies and with crowd regions kept and dropped.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "data/datasets/coco/coco.pb.h"
#include "data/datasets/coco/coco_dataset.h"
#include "tools/fuzz/fuzz_util.h"

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
  return 0;
}
