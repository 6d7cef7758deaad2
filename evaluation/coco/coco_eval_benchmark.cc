// COCO evaluation end to end, the C++ side of benchmarks/coco_eval_vs_pycocotools.sh: reads a
// COCO instances annotation file and a results JSON (pycocotools' loadRes format, masks as
// compressed RLE), evaluates bbox and segm with coco_protocol.h's EvaluateCoco, and prints
// the twelve summary numbers of each and the seconds (parsing and evaluating):
//   coco_eval_benchmark --annotations=instances.json --results=results.json
// As pycocotools with detectron2's convention (see coco_protocol.h): a ground truth's area is
// the file's "area", a detection's is its box's w * h for bbox and its mask's pixel count for
// segm; images are every image of the annotation file, in ascending id; categories are the
// file's categories in ascending id.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/run_length_mask.h"
#include "core/sample.h"
#include "evaluation/coco/coco_protocol.h"
#include "nlohmann/json.hpp"

namespace {

using Json = nlohmann::json;
using vision::evaluation::coco::CocoResult;
using vision::evaluation::coco::ImageRecord;
using vision::evaluation::coco::Instance;
using vision::evaluation::coco::IouType;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

[[noreturn]] void Fail(const std::string& message) {
  std::cerr << "coco_eval_benchmark: " << message << "\n";
  std::exit(1);
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot open " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Json::parse(buffer.str());
}

std::array<double, 4> Box(const Json& j) { return j.get<std::array<double, 4>>(); }

// A segmentation as an RLE of h x w: polygons, uncompressed RLE (counts a list) or
// compressed RLE (counts a string).
vision::core::RunLengthMask Mask(const Json& segmentation, int height, int width) {
  if (segmentation.is_array()) {
    // As pycocotools' annToRLE and CocoIndex::GroundTruthObject: each polygon rasterised from
    // the file's doubles (floats move boundary pixels of two-decimal coordinates), then merged.
    vision::core::RunLengthMask rle = vision::core::RleFromPolygonCoordinates({}, height, width);
    for (const Json& flat : segmentation) {
      rle = vision::core::RleUnion(rle, vision::core::RleFromPolygonCoordinates(
                                            flat.get<std::vector<double>>(), height, width));
    }
    return rle;
  }
  vision::core::RunLengthMask rle;
  const std::array<int, 2> size = segmentation.at("size").get<std::array<int, 2>>();
  rle.height = size[0];
  rle.width = size[1];
  const Json& counts = segmentation.at("counts");
  if (counts.is_string()) {
    absl::StatusOr<std::vector<uint32_t>> decoded =
        vision::core::DecodeCocoRleString(counts.get_ref<const std::string&>());
    if (!decoded.ok()) Fail(std::string(decoded.status().message()));
    rle.counts = *std::move(decoded);
  } else {
    rle.counts = counts.get<std::vector<uint32_t>>();
  }
  return rle;
}

void Print(const char* name, const CocoResult& result) {
  std::printf("ours %s", name);
  for (double v : result.stats) std::printf(" %.12f", v);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string annotations_path, results_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--annotations=", 0) == 0) {
      annotations_path = arg.substr(14);
    } else if (arg.rfind("--results=", 0) == 0) {
      results_path = arg.substr(10);
    } else {
      Fail("unknown argument " + arg);
    }
  }
  if (annotations_path.empty() || results_path.empty()) {
    Fail("usage: coco_eval_benchmark --annotations=FILE --results=FILE");
  }
  const auto start = std::chrono::steady_clock::now();

  const Json annotations = ReadJson(annotations_path);
  std::map<int64_t, ImageRecord> images;
  std::map<int64_t, std::pair<int, int>> sizes;  // height, width
  for (const Json& image : annotations.at("images")) {
    const int64_t id = image.at("id").get<int64_t>();
    images[id].image_id = id;
    sizes[id] = {image.at("height").get<int>(), image.at("width").get<int>()};
  }
  std::vector<int64_t> category_ids;
  for (const Json& category : annotations.at("categories")) {
    category_ids.push_back(category.at("id").get<int64_t>());
  }
  std::sort(category_ids.begin(), category_ids.end());
  std::map<int64_t, int> label_of;
  for (size_t i = 0; i < category_ids.size(); ++i) label_of[category_ids[i]] = static_cast<int>(i);
  auto label = [&](const Json& j) {
    const auto it = label_of.find(j.at("category_id").get<int64_t>());
    if (it == label_of.end()) Fail("unknown category id " + j.at("category_id").dump());
    return it->second;
  };
  auto image_of = [&](const Json& j) -> std::pair<ImageRecord*, std::pair<int, int>> {
    const int64_t id = j.at("image_id").get<int64_t>();
    const auto it = images.find(id);
    if (it == images.end()) Fail("unknown image id " + std::to_string(id));
    return {&it->second, sizes[id]};
  };
  for (const Json& annotation : annotations.at("annotations")) {
    auto [record, size] = image_of(annotation);
    Instance truth;
    truth.label = label(annotation);
    truth.crowd = annotation.value("iscrowd", 0) != 0;
    truth.box = Box(annotation.at("bbox"));
    truth.area = annotation.at("area").get<double>();
    truth.mask = Mask(annotation.at("segmentation"), size.first, size.second);
    record->truths.push_back(std::move(truth));
  }
  const Json results = ReadJson(results_path);
  for (const Json& result : results) {
    auto [record, size] = image_of(result);
    Instance detection;
    detection.label = label(result);
    detection.score = result.at("score").get<double>();
    detection.box = Box(result.at("bbox"));
    detection.mask = Mask(result.at("segmentation"), size.first, size.second);
    record->detections.push_back(std::move(detection));
  }
  const double parse_seconds = Seconds(start);

  std::vector<const ImageRecord*> ordered;
  for (const auto& [id, record] : images) ordered.push_back(&record);
  const std::array<int, 3> max_dets = {1, 10, 100};
  const int num_labels = static_cast<int>(category_ids.size());
  std::array<double, 2> eval_seconds;
  std::array<CocoResult, 2> evaluated;
  for (IouType type : {IouType::kBbox, IouType::kSegm}) {
    const auto eval_start = std::chrono::steady_clock::now();
    const int t = type == IouType::kBbox ? 0 : 1;
    for (auto& [id, record] : images) {
      for (Instance& d : record.detections) {
        d.area = type == IouType::kBbox ? d.box[2] * d.box[3]
                                        : static_cast<double>(
                                              vision::core::RleArea(d.mask));
      }
    }
    absl::StatusOr<CocoResult> result =
        vision::evaluation::coco::EvaluateCoco(ordered, num_labels, type, max_dets);
    if (!result.ok()) Fail(std::string(result.status().message()));
    evaluated[t] = *std::move(result);
    eval_seconds[t] = Seconds(eval_start);
  }
  const double total = Seconds(start);
  Print("bbox", evaluated[0]);
  Print("segm", evaluated[1]);
  std::printf("ours seconds %.3f (parse %.3f, bbox %.3f, segm %.3f)\n", total, parse_seconds,
              eval_seconds[0], eval_seconds[1]);
  return 0;
}
