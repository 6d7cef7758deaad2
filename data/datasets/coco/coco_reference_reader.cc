// The COCO reader as it was before the compact index (nlohmann::json tree, one
// ObjectInstance per annotation), kept as the tests' reference: the compact reader must give
// the same objects and the same messages. Not for production use: it needs about five times
// the file's size in memory.
#include "data/datasets/coco/coco_reference_reader.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/nesting.h"
#include "core/run_length_mask.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "data/datasets/coco/coco_index.h"

namespace vision::data::datasets::coco {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The rule as it was (coco_index.h has the production constant).
constexpr double kMaxOutsideFraction = 0.5;

// `path` if absolute, else `path` under `root`.
std::string ResolveUnder(const std::string& root, const std::string& path) {
  fs::path p(path);
  return p.is_absolute() ? p.string() : (fs::path(root) / p).string();
}

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view hint) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat(
        "COCO: annotation file '", path, "' ",
        fs::exists(path, error) ? "is not a regular file" : "does not exist", " (", hint, ")"));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open the file"));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return contents.str();
}

// A JSON value as it would appear in the file, cut so that a huge array stays readable.
std::string Excerpt(const Json& value) {
  constexpr size_t kMax = 60;
  std::string text = value.dump();
  if (text.size() > kMax) text = absl::StrCat(text.substr(0, kMax), "...");
  return text;
}

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

// Field readers: the messages name the key; the caller prefixes the file and the record.
absl::StatusOr<const Json*> Field(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return Invalid(absl::StrCat("missing \"", key, "\""));
  return &*it;
}

absl::StatusOr<int64_t> AsInteger(const Json& value, absl::string_view what) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(value.get<uint64_t>());
    }
  } else if (value.is_number_integer()) {
    return value.get<int64_t>();
  } else if (value.is_number_float()) {
    // Some exporters write integers as 7.0.
    const double v = value.get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 0x1.0p53) {
      return static_cast<int64_t>(v);
    }
  }
  return Invalid(absl::StrCat(what, " is ", Excerpt(value), ", not an integer"));
}

absl::StatusOr<int64_t> IntegerField(const Json& object, const char* key) {
  VISION_ASSIGN_OR_RETURN(const Json* value, Field(object, key));
  return AsInteger(*value, absl::StrCat("\"", key, "\""));
}

absl::StatusOr<double> AsNumber(const Json& value, absl::string_view what) {
  if (!value.is_number() || !std::isfinite(value.get<double>())) {
    return Invalid(absl::StrCat(what, " is ", Excerpt(value), ", not a finite number"));
  }
  return value.get<double>();
}

// Checks a point against the image (kMaxOutsideFraction) and clamps it to [0, w] x [0, h].
absl::Status ClampPoint(double* x, double* y, int width, int height, absl::string_view what) {
  const double slack_x = kMaxOutsideFraction * width;
  const double slack_y = kMaxOutsideFraction * height;
  if (*x < -slack_x || *x > width + slack_x || *y < -slack_y || *y > height + slack_y) {
    return Invalid(absl::StrCat(
        what, " (", *x, ", ", *y, ") lies far outside the ", width, "x", height,
        " image (more than ", 100 * kMaxOutsideFraction,
        "% of its size beyond the border); does the annotation belong to another image?"));
  }
  *x = std::clamp(*x, 0.0, static_cast<double>(width));
  *y = std::clamp(*y, 0.0, static_cast<double>(height));
  return absl::OkStatus();
}

absl::StatusOr<cv::Rect2f> ParseBox(const Json& annotation, int width, int height) {
  VISION_ASSIGN_OR_RETURN(const Json* bbox, Field(annotation, "bbox"));
  if (!bbox->is_array() || bbox->size() != 4) {
    return Invalid(absl::StrCat("\"bbox\" is ", Excerpt(*bbox), ", not [x, y, width, height]"));
  }
  double v[4];
  for (int i = 0; i < 4; ++i) {
    VISION_ASSIGN_OR_RETURN(v[i], AsNumber((*bbox)[i], absl::StrCat("bbox[", i, "]")));
  }
  if (v[2] < 0 || v[3] < 0) {
    return Invalid(absl::StrCat("bbox ", Excerpt(*bbox), " has a negative ",
                                v[2] < 0 ? "width" : "height",
                                "; COCO boxes are [x, y, width, height], not corners"));
  }
  double x1 = v[0];
  double y1 = v[1];
  double x2 = v[0] + v[2];
  double y2 = v[1] + v[3];
  VISION_RETURN_IF_ERROR(ClampPoint(&x1, &y1, width, height, "bbox corner"));
  VISION_RETURN_IF_ERROR(ClampPoint(&x2, &y2, width, height, "bbox corner"));
  return cv::Rect2f(static_cast<float>(x1), static_cast<float>(y1), static_cast<float>(x2 - x1),
                    static_cast<float>(y2 - y1));
}

absl::StatusOr<std::vector<core::Polygon>> ParsePolygons(const Json& segmentation, int width,
                                                         int height) {
  std::vector<core::Polygon> polygons;
  for (size_t i = 0; i < segmentation.size(); ++i) {
    const Json& flat = segmentation[i];
    const std::string what = absl::StrCat("segmentation polygon ", i);
    if (!flat.is_array()) {
      return Invalid(
          absl::StrCat(what, " is ", Excerpt(flat), ", not a flat list [x1, y1, x2, y2, ...]"));
    }
    if (flat.size() % 2 != 0) {
      return Invalid(absl::StrCat(what, " has ", flat.size(),
                                  " numbers, an odd count; a polygon is a flat list "
                                  "[x1, y1, x2, y2, ...]"));
    }
    if (flat.size() < 6) {
      return Invalid(absl::StrCat(what, " has ", flat.size() / 2,
                                  " point(s); a polygon needs at least 3 points (6 numbers)"));
    }
    core::Polygon polygon;
    polygon.reserve(flat.size() / 2);
    for (size_t k = 0; k < flat.size(); k += 2) {
      VISION_ASSIGN_OR_RETURN(double x, AsNumber(flat[k], absl::StrCat(what, "[", k, "]")));
      VISION_ASSIGN_OR_RETURN(double y, AsNumber(flat[k + 1], absl::StrCat(what, "[", k + 1, "]")));
      VISION_RETURN_IF_ERROR(ClampPoint(&x, &y, width, height, absl::StrCat(what, " point")));
      polygon.emplace_back(static_cast<float>(x), static_cast<float>(y));
    }
    polygons.push_back(std::move(polygon));
  }
  return polygons;
}

absl::StatusOr<core::RunLengthMask> ParseRle(const Json& segmentation, int width, int height) {
  VISION_ASSIGN_OR_RETURN(const Json* size, Field(segmentation, "size"));
  VISION_ASSIGN_OR_RETURN(const Json* counts, Field(segmentation, "counts"));
  if (!size->is_array() || size->size() != 2) {
    return Invalid(absl::StrCat("RLE \"size\" is ", Excerpt(*size), ", not [height, width]"));
  }
  VISION_ASSIGN_OR_RETURN(int64_t rle_height, AsInteger((*size)[0], "RLE height"));
  VISION_ASSIGN_OR_RETURN(int64_t rle_width, AsInteger((*size)[1], "RLE width"));
  if (rle_height != height || rle_width != width) {
    return Invalid(absl::StrCat("RLE size [", rle_height, ", ", rle_width,
                                "] does not match the image's [height, width] [", height, ", ",
                                width, "]"));
  }
  core::RunLengthMask rle;
  rle.height = height;
  rle.width = width;
  if (counts->is_string()) {
    VISION_ASSIGN_OR_RETURN(rle.counts, core::DecodeCocoRleString(counts->get<std::string>()));
  } else if (counts->is_array()) {
    rle.counts.reserve(counts->size());
    for (size_t i = 0; i < counts->size(); ++i) {
      VISION_ASSIGN_OR_RETURN(int64_t run,
                              AsInteger((*counts)[i], absl::StrCat("RLE counts[", i, "]")));
      if (run < 0 || run > std::numeric_limits<uint32_t>::max()) {
        return Invalid(absl::StrCat("RLE counts[", i, "] is ", run, ", not a pixel count"));
      }
      rle.counts.push_back(static_cast<uint32_t>(run));
    }
  } else {
    return Invalid(absl::StrCat("RLE \"counts\" is ", Excerpt(*counts),
                                "; expected a list of runs or a compressed string"));
  }
  int64_t total = 0;
  for (uint32_t run : rle.counts) total += run;
  if (total != static_cast<int64_t>(height) * width) {
    return Invalid(absl::StrCat("RLE counts add up to ", total, " pixels but the ", width, "x",
                                height, " mask has ", static_cast<int64_t>(height) * width));
  }
  return rle;
}

struct Category {
  int64_t id;
  std::string name;
};

absl::StatusOr<std::vector<Category>> ParseCategories(const Json& root) {
  VISION_ASSIGN_OR_RETURN(const Json* categories, Field(root, "categories"));
  if (!categories->is_array()) return Invalid("\"categories\" is not a list");
  std::vector<Category> result;
  for (size_t i = 0; i < categories->size(); ++i) {
    const Json& category = (*categories)[i];
    const std::string where = absl::StrCat("categories[", i, "]");
    if (!category.is_object()) return Invalid(absl::StrCat(where, " is not an object"));
    VISION_ASSIGN_OR_RETURN(const int64_t id,
                            core::WithContext(where, IntegerField(category, "id")));
    const std::string label = absl::StrCat("category ", id);
    VISION_ASSIGN_OR_RETURN(const Json* name, Field(category, "name"));
    if (!name->is_string()) {
      return Invalid(absl::StrCat(label, ": \"name\" is ", Excerpt(*name), ", not a string"));
    }
    result.push_back({id, name->get<std::string>()});
  }
  if (result.empty()) return Invalid("\"categories\" is empty; a detector needs classes");
  std::sort(result.begin(), result.end(),
            [](const Category& a, const Category& b) { return a.id < b.id; });
  for (size_t i = 1; i < result.size(); ++i) {
    if (result[i].id == result[i - 1].id) {
      return Invalid(absl::StrCat("category ", result[i].id, " is listed twice ('",
                                  result[i - 1].name, "' and '", result[i].name, "')"));
    }
  }
  return result;
}

absl::StatusOr<std::vector<ReferenceImage>> ParseImages(const Json& root) {
  VISION_ASSIGN_OR_RETURN(const Json* images, Field(root, "images"));
  if (!images->is_array()) return Invalid("\"images\" is not a list");
  std::vector<ReferenceImage> result;
  result.reserve(images->size());
  for (size_t i = 0; i < images->size(); ++i) {
    const Json& entry = (*images)[i];
    const std::string where = absl::StrCat("images[", i, "]");
    if (!entry.is_object()) return Invalid(absl::StrCat(where, " is not an object"));
    VISION_ASSIGN_OR_RETURN(const int64_t id, core::WithContext(where, IntegerField(entry, "id")));
    const std::string label = absl::StrCat("image ", id);
    ReferenceImage image;
    image.id = id;
    absl::StatusOr<const Json*> file_name = Field(entry, "file_name");
    if (!file_name.ok() || !(*file_name)->is_string() || (*file_name)->get<std::string>().empty()) {
      return Invalid(absl::StrCat(label, ": \"file_name\" is ",
                                  file_name.ok() ? Excerpt(**file_name) : "missing",
                                  ", not a file name"));
    }
    image.file_name = (*file_name)->get<std::string>();
    for (const auto& [key, side] : {std::pair<const char*, int*>{"width", &image.width},
                                    std::pair<const char*, int*>{"height", &image.height}}) {
      VISION_ASSIGN_OR_RETURN(const int64_t value,
                              core::WithContext(label, IntegerField(entry, key)));
      if (value <= 0 || value > (1 << 16)) {
        return Invalid(absl::StrCat(label, ": \"", key, "\" is ", value,
                                    "; image sides must be in [1, 65536]"));
      }
      *side = static_cast<int>(value);
    }
    result.push_back(std::move(image));
  }
  std::sort(result.begin(), result.end(),
            [](const ReferenceImage& a, const ReferenceImage& b) { return a.id < b.id; });
  for (size_t i = 1; i < result.size(); ++i) {
    if (result[i].id == result[i - 1].id) {
      return Invalid(absl::StrCat("image id ", result[i].id, " is used twice ('",
                                  result[i - 1].file_name, "' and '", result[i].file_name,
                                  "'); image ids must be unique"));
    }
  }
  return result;
}

// Parses one annotation into `object`; `image_id` is set as soon as it is known, so that the
// caller's message can name the image.
absl::Status ParseAnnotation(const Json& annotation,
                             const std::map<int64_t, ReferenceImage*>& images,
                             const std::map<int64_t, int>& labels, int64_t* image_id,
                             ReferenceImage** image, core::ObjectInstance* object) {
  VISION_ASSIGN_OR_RETURN(*image_id, IntegerField(annotation, "image_id"));
  auto found_image = images.find(*image_id);
  if (found_image == images.end()) {
    return Invalid(absl::StrCat("image_id ", *image_id, " is not in \"images\""));
  }
  *image = found_image->second;
  VISION_ASSIGN_OR_RETURN(int64_t category_id, IntegerField(annotation, "category_id"));
  auto found_label = labels.find(category_id);
  if (found_label == labels.end()) {
    return Invalid(absl::StrCat("category_id ", category_id, " is not in \"categories\""));
  }
  object->label = found_label->second;

  auto crowd = annotation.find("iscrowd");
  if (crowd != annotation.end()) {
    if (crowd->is_boolean()) {
      object->is_crowd = crowd->get<bool>();
    } else {
      VISION_ASSIGN_OR_RETURN(int64_t value, AsInteger(*crowd, "\"iscrowd\""));
      if (value != 0 && value != 1) {
        return Invalid(absl::StrCat("\"iscrowd\" is ", value, "; use 0 or 1"));
      }
      object->is_crowd = value == 1;
    }
  }

  const int width = (*image)->width;
  const int height = (*image)->height;
  VISION_ASSIGN_OR_RETURN(object->box, ParseBox(annotation, width, height));
  auto segmentation = annotation.find("segmentation");
  if (segmentation == annotation.end()) return absl::OkStatus();
  if (segmentation->is_array()) {
    VISION_ASSIGN_OR_RETURN(object->polygons, ParsePolygons(*segmentation, width, height));
  } else if (segmentation->is_object()) {
    VISION_ASSIGN_OR_RETURN(object->rle, ParseRle(*segmentation, width, height));
  } else {
    return Invalid(absl::StrCat("\"segmentation\" is ", Excerpt(*segmentation),
                                "; expected a list of polygons or an RLE {\"counts\", \"size\"}"));
  }
  return absl::OkStatus();
}

bool HasNonCrowdObject(const ReferenceImage& image) {
  return std::any_of(image.objects.begin(), image.objects.end(),
                     [](const core::ObjectInstance& object) { return !object.is_crowd; });
}

}  // namespace

absl::StatusOr<ReferenceCoco> ReadCocoReference(const CocoOptions& options) {
  if (options.root().empty()) {
    return absl::InvalidArgumentError(
        "CocoOptions.root is empty: set it to the directory that holds the annotation file "
        "(annotation_file) and the images (image_dir)");
  }
  const std::string json_path = ResolveUnder(options.root(), options.annotation_file());
  VISION_ASSIGN_OR_RETURN(std::string text,
                          ReadFile(json_path, absl::StrCat("from CocoOptions.annotation_file '",
                                                           options.annotation_file(),
                                                           "' under root '", options.root(), "'")));
  // Every message below names the file, and the place in it unless `where` is empty; takes
  // an absl::Status or an absl::StatusOr.
  auto in_file = [&json_path](absl::string_view where, auto status) {
    return core::WithContext(where.empty() ? json_path : absl::StrCat(json_path, ": ", where),
                             std::move(status));
  };

  if (const std::optional<size_t> deep = core::FindExcessNesting(text, core::TextSyntax::kJson)) {
    return CocoNestingError(json_path, *deep);
  }
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(json_path, ": malformed JSON at byte ", e.byte, ": ", e.what()));
  } catch (const Json::exception& e) {
    // E.g. a number too large for a double.
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": unreadable JSON: ", e.what()));
  }
  std::string().swap(text);  // the parsed tree holds it all now; COCO's JSON is 450 MB
  if (!root.is_object()) {
    return in_file("", Invalid("the top level is not an object with \"images\", "
                               "\"annotations\" and \"categories\""));
  }

  VISION_ASSIGN_OR_RETURN(const std::vector<Category> categories,
                          in_file("", ParseCategories(root)));
  std::map<int64_t, int> labels;
  std::vector<std::string> class_names;
  std::vector<int64_t> category_ids;
  for (const Category& category : categories) {
    labels[category.id] = static_cast<int>(class_names.size());
    class_names.push_back(category.name);
    category_ids.push_back(category.id);
  }

  VISION_ASSIGN_OR_RETURN(std::vector<ReferenceImage> images, in_file("", ParseImages(root)));
  if (images.empty()) return in_file("", Invalid("\"images\" is empty"));
  std::map<int64_t, ReferenceImage*> image_by_id;
  for (ReferenceImage& image : images) image_by_id[image.id] = &image;

  // A file without "annotations" (like COCO's image_info_test2017.json) lists images only.
  int64_t num_annotations = 0;
  int64_t num_crowd_dropped = 0;
  auto annotations = root.find("annotations");
  if (annotations != root.end()) {
    if (!annotations->is_array()) return in_file("", Invalid("\"annotations\" is not a list"));
    std::map<int64_t, size_t> seen_ids;
    for (size_t i = 0; i < annotations->size(); ++i) {
      const Json& annotation = (*annotations)[i];
      if (!annotation.is_object()) {
        return in_file(absl::StrCat("annotations[", i, "]"), Invalid("not an object"));
      }
      VISION_ASSIGN_OR_RETURN(const int64_t id, in_file(absl::StrCat("annotations[", i, "]"),
                                                        IntegerField(annotation, "id")));
      const std::string label = absl::StrCat("annotation ", id);
      if (auto [it, inserted] = seen_ids.emplace(id, i); !inserted) {
        return in_file(label, Invalid(absl::StrCat("the id is used twice (annotations[", it->second,
                                                   "] and annotations[", i,
                                                   "]); annotation ids must be unique")));
      }
      core::ObjectInstance object;
      object.annotation_id = id;
      int64_t image_id = 0;
      ReferenceImage* image = nullptr;
      if (absl::Status status =
              ParseAnnotation(annotation, image_by_id, labels, &image_id, &image, &object);
          !status.ok()) {
        return in_file(image == nullptr ? label : absl::StrCat(label, " (image ", image_id, ")"),
                       status);
      }
      ++num_annotations;
      if (object.is_crowd && !options.keep_crowd()) {
        ++num_crowd_dropped;
        continue;
      }
      image->objects.push_back(std::move(object));
    }
  }

  const size_t num_images = images.size();
  if (options.empty_images() == CocoOptions::SKIP) {
    images.erase(
        std::remove_if(images.begin(), images.end(),
                       [](const ReferenceImage& image) { return !HasNonCrowdObject(image); }),
        images.end());
    if (images.empty()) {
      return in_file("", absl::NotFoundError(absl::StrCat(
                             "none of the ", num_images,
                             " images has a non-crowd annotation, so empty_images: SKIP leaves "
                             "no sample; set empty_images: KEEP to read them anyway")));
    }
  }
  ReferenceCoco result;
  result.class_names = std::move(class_names);
  result.category_ids = std::move(category_ids);
  result.images = std::move(images);
  result.num_annotations = num_annotations;
  result.num_crowd_dropped = num_crowd_dropped;
  return result;
}

}  // namespace vision::data::datasets::coco
