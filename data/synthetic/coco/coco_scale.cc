#include "data/synthetic/coco/coco_scale.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/run_length_mask.h"
#include "data/synthetic/seeded_random.h"

namespace vision::data::synthetic::coco {
namespace {

namespace fs = std::filesystem;

struct Category {
  int id;
  const char* name;
};

// COCO's 80 categories under their ids.
constexpr Category kCategories[] = {
    {1, "person"},         {2, "bicycle"},       {3, "car"},
    {4, "motorcycle"},     {5, "airplane"},      {6, "bus"},
    {7, "train"},          {8, "truck"},         {9, "boat"},
    {10, "traffic light"}, {11, "fire hydrant"}, {13, "stop sign"},
    {14, "parking meter"}, {15, "bench"},        {16, "bird"},
    {17, "cat"},           {18, "dog"},          {19, "horse"},
    {20, "sheep"},         {21, "cow"},          {22, "elephant"},
    {23, "bear"},          {24, "zebra"},        {25, "giraffe"},
    {27, "backpack"},      {28, "umbrella"},     {31, "handbag"},
    {32, "tie"},           {33, "suitcase"},     {34, "frisbee"},
    {35, "skis"},          {36, "snowboard"},    {37, "sports ball"},
    {38, "kite"},          {39, "baseball bat"}, {40, "baseball glove"},
    {41, "skateboard"},    {42, "surfboard"},    {43, "tennis racket"},
    {44, "bottle"},        {46, "wine glass"},   {47, "cup"},
    {48, "fork"},          {49, "knife"},        {50, "spoon"},
    {51, "bowl"},          {52, "banana"},       {53, "apple"},
    {54, "sandwich"},      {55, "orange"},       {56, "broccoli"},
    {57, "carrot"},        {58, "hot dog"},      {59, "pizza"},
    {60, "donut"},         {61, "cake"},         {62, "chair"},
    {63, "couch"},         {64, "potted plant"}, {65, "bed"},
    {67, "dining table"},  {70, "toilet"},       {72, "tv"},
    {73, "laptop"},        {74, "mouse"},        {75, "remote"},
    {76, "keyboard"},      {77, "cell phone"},   {78, "microwave"},
    {79, "oven"},          {80, "toaster"},      {81, "sink"},
    {82, "refrigerator"},  {84, "book"},         {85, "clock"},
    {86, "vase"},          {87, "scissors"},     {88, "teddy bear"},
    {89, "hair drier"},    {90, "toothbrush"},
};
constexpr int kNumCategories = sizeof(kCategories) / sizeof(kCategories[0]);

// `hundredths` / 100 as Python's json writes such a float: "12.5", "12.0", "-3.25".
void AppendHundredths(std::string* out, int64_t hundredths) {
  if (hundredths < 0) {
    out->push_back('-');
    hundredths = -hundredths;
  }
  char buffer[32];
  int n = std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(hundredths / 100));
  out->append(buffer, n);
  out->push_back('.');
  const int fraction = static_cast<int>(hundredths % 100);
  out->push_back(static_cast<char>('0' + fraction / 10));
  if (fraction % 10 != 0) out->push_back(static_cast<char>('0' + fraction % 10));
}

void AppendInt(std::string* out, int64_t value) {
  char buffer[32];
  int n = std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(value));
  out->append(buffer, n);
}

// Appends `length` pixels of `value` to column-major runs that start with background.
void AddRun(std::vector<uint32_t>* counts, int* current, int value, int64_t length) {
  if (length == 0) return;
  if (value != *current) {
    counts->push_back(0);
    *current = value;
  }
  counts->back() += static_cast<uint32_t>(length);
}

class Writer {
 public:
  Writer(const CocoScaleOptions& options, std::FILE* file) : options_(options), file_(file) {}

  bool Write(CocoScaleSummary* summary) {
    out_ =
        "{\"info\":{\"description\":\"Synthetic COCO-shaped annotations (no images)\","
        "\"version\":\"1.0\",\"year\":2017},\"licenses\":[{\"url\":"
        "\"http://creativecommons.org/licenses/by-nc-sa/2.0/\",\"id\":1,\"name\":"
        "\"Attribution-NonCommercial-ShareAlike License\"}], \"images\":[";
    SeededRandom image_rng(MixSeed(options_.seed, 1, 0));
    std::vector<Image> images(options_.num_images);
    int64_t id = 0;
    for (int64_t i = 0; i < options_.num_images; ++i) {
      Image& image = images[i];
      id += image_rng.Int(1, 9);
      image.id = id;
      const int short_side = image_rng.Int(240, 640);
      const bool landscape = image_rng.Chance(0.7);
      image.width = landscape ? 640 : short_side;
      image.height = landscape ? short_side : 640;
      if (i > 0) out_ += ",";
      out_ += "{\"license\":";
      AppendInt(&out_, image_rng.Int(1, 8));
      char name[32];
      std::snprintf(name, sizeof(name), "%012lld.jpg", static_cast<long long>(image.id));
      absl::StrAppend(&out_, ",\"file_name\":\"", name,
                      "\",\"coco_url\":\"http://images.cocodataset.org/train2017/", name,
                      "\",\"height\":", image.height, ",\"width\":", image.width,
                      ", \"date_captured\":\"2013-11-14 11:18:45\", \"flickr_url\":"
                      "\"http://farm3.staticflickr.com/2/",
                      name, "\",\"id\":", image.id, "}");
      if (!Flush(false)) return false;
    }
    out_ += "],\"annotations\":[";
    int64_t annotation_id = 0;
    bool first = true;
    for (int64_t i = 0; i < options_.num_images; ++i) {
      SeededRandom rng(MixSeed(options_.seed, 2, static_cast<uint64_t>(i)));
      int count = 0;
      if (!rng.Chance(options_.empty_image_fraction)) {
        // 1 + geometric, so that the mean over non-empty images is annotations_per_image.
        const double p = 1.0 / std::max(1.0, options_.annotations_per_image);
        count = 1;
        while (count < 100 && !rng.Chance(p)) ++count;
      }
      for (int k = 0; k < count; ++k) {
        annotation_id += rng.Int(1, 3);
        if (!first) out_ += ",";
        first = false;
        WriteAnnotation(images[i], annotation_id, &rng, summary);
        if (!Flush(false)) return false;
      }
    }
    out_ += "],\"categories\":[";
    for (int c = 0; c < kNumCategories; ++c) {
      absl::StrAppend(&out_, c > 0 ? "," : "",
                      "{\"supercategory\":\"thing\",\"id\":", kCategories[c].id, ",\"name\":\"",
                      kCategories[c].name, "\"}");
    }
    out_ += "]}";
    summary->images = options_.num_images;
    return Flush(true);
  }

 private:
  struct Image {
    int64_t id;
    int width;
    int height;
  };

  void WriteAnnotation(const Image& image, int64_t id, SeededRandom* rng,
                       CocoScaleSummary* summary) {
    ++summary->annotations;
    const int category = rng->Chance(0.3) ? 0 : rng->Int(1, kNumCategories - 1);
    // Object size: log-uniform between 8 pixels and the image.
    const double max_side = std::min(image.width, image.height);
    const double size = std::exp(rng->Uniform(std::log(8.0), std::log(max_side)));
    const double cx = rng->Uniform(size / 2, image.width - size / 2);
    const double cy = rng->Uniform(size / 2, image.height - size / 2);
    int64_t box[4];    // x0, y0, x1, y1 in hundredths
    int64_t area = 0;  // hundredths
    const bool crowd = rng->Chance(options_.crowd_fraction);
    if (crowd) {
      ++summary->crowd;
      std::vector<uint32_t> counts(1, 0);
      int current = 0;
      const int x0 = std::max(0, static_cast<int>(cx - size / 2));
      const int x1 = std::min(image.width, static_cast<int>(cx + size / 2) + 1);
      int y_min = image.height;
      int y_max = 0;
      int64_t pixels = 0;
      AddRun(&counts, &current, 0, static_cast<int64_t>(x0) * image.height);
      for (int x = x0; x < x1; ++x) {
        const int half = std::max(1, static_cast<int>(rng->Uniform(0.2, 0.5) * size));
        const int a = std::max(0, static_cast<int>(cy) - half);
        const int b = std::min(image.height, static_cast<int>(cy) + half);
        AddRun(&counts, &current, 0, a);
        AddRun(&counts, &current, 1, b - a);
        AddRun(&counts, &current, 0, image.height - b);
        y_min = std::min(y_min, a);
        y_max = std::max(y_max, b);
        pixels += b - a;
      }
      AddRun(&counts, &current, 0, static_cast<int64_t>(image.width - x1) * image.height);
      box[0] = 100LL * x0;
      box[1] = 100LL * y_min;
      box[2] = 100LL * x1;
      box[3] = 100LL * y_max;
      area = 100 * pixels;
      out_ += "{\"segmentation\":{\"counts\":";
      if (rng->Chance(options_.compressed_rle_fraction)) {
        // The alphabet '0'..'o' holds one character JSON escapes: the backslash.
        out_ += '"';
        for (const char c : core::EncodeCocoRleString(counts)) {
          if (c == '\\') out_ += '\\';
          out_ += c;
        }
        out_ += '"';
      } else {
        out_ += "[";
        for (size_t r = 0; r < counts.size(); ++r) {
          if (r > 0) out_ += ",";
          AppendInt(&out_, counts[r]);
        }
        out_ += "]";
      }
      absl::StrAppend(&out_, ",\"size\":[", image.height, ",", image.width, "]}");
    } else {
      const int parts = rng->Chance(0.9) ? 1 : rng->Int(2, 3);
      box[0] = box[1] = INT64_MAX;
      box[2] = box[3] = INT64_MIN;
      out_ += "{\"segmentation\":[";
      for (int part = 0; part < parts; ++part) {
        ++summary->polygons;
        const int points = static_cast<int>(std::exp(rng->Uniform(std::log(4.0), std::log(80.0))));
        summary->points += points;
        const double px = cx + (part == 0 ? 0.0 : rng->Uniform(-size / 4, size / 4));
        const double py = cy + (part == 0 ? 0.0 : rng->Uniform(-size / 4, size / 4));
        const double radius = size / (part == 0 ? 2 : 4);
        out_ += part > 0 ? ",[" : "[";
        double shoelace = 0;
        int64_t first_x = 0, first_y = 0, last_x = 0, last_y = 0;
        for (int p = 0; p < points; ++p) {
          const double angle = 2 * M_PI * p / points;
          const double r = radius * rng->Uniform(0.5, 1.0);
          const int64_t x = std::clamp<int64_t>(std::llround(100 * (px + r * std::cos(angle))), 0,
                                                100LL * image.width);
          const int64_t y = std::clamp<int64_t>(std::llround(100 * (py + r * std::sin(angle))), 0,
                                                100LL * image.height);
          if (p > 0) {
            out_ += ",";
            shoelace += static_cast<double>(last_x) * y - static_cast<double>(x) * last_y;
          } else {
            first_x = x;
            first_y = y;
          }
          AppendHundredths(&out_, x);
          out_ += ",";
          AppendHundredths(&out_, y);
          box[0] = std::min(box[0], x);
          box[1] = std::min(box[1], y);
          box[2] = std::max(box[2], x);
          box[3] = std::max(box[3], y);
          last_x = x;
          last_y = y;
        }
        shoelace += static_cast<double>(last_x) * first_y - static_cast<double>(first_x) * last_y;
        area += std::llround(std::abs(shoelace) / 2 / 100);
        out_ += "]";
      }
      out_ += "]";
    }
    out_ += ",\"area\":";
    AppendHundredths(&out_, area);
    absl::StrAppend(&out_, ",\"iscrowd\":", crowd ? 1 : 0, ",\"image_id\":", image.id,
                    ",\"bbox\":[");
    AppendHundredths(&out_, box[0]);
    out_ += ",";
    AppendHundredths(&out_, box[1]);
    out_ += ",";
    AppendHundredths(&out_, box[2] - box[0]);
    out_ += ",";
    AppendHundredths(&out_, box[3] - box[1]);
    absl::StrAppend(&out_, "],\"category_id\":", kCategories[category].id, ",\"id\":", id, "}");
  }

  bool Flush(bool all) {
    if (!all && out_.size() < (1 << 20)) return true;
    bytes_ += static_cast<int64_t>(out_.size());
    const bool ok = std::fwrite(out_.data(), 1, out_.size(), file_) == out_.size();
    out_.clear();
    return ok;
  }

 public:
  int64_t bytes() const { return bytes_; }

 private:
  const CocoScaleOptions& options_;
  std::FILE* file_;
  std::string out_;
  int64_t bytes_ = 0;
};

}  // namespace

absl::Status WriteCocoScaleAnnotations(const CocoScaleOptions& options, const std::string& path,
                                       CocoScaleSummary* summary) {
  if (options.num_images < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_images is ", options.num_images, "; write at least one image"));
  }
  std::error_code error;
  if (fs::exists(path, error)) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, ": already exists; remove it or choose another path"));
  }
  const std::string temporary = absl::StrCat(path, ".tmp");
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(temporary, ": cannot create the file: ", std::strerror(errno)));
  }
  CocoScaleSummary local;
  Writer writer(options, file);
  const bool written = writer.Write(&local);
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    fs::remove(temporary, error);
    return absl::DataLossError(absl::StrCat(path, ": write failed (disk full?)"));
  }
  fs::rename(temporary, path, error);
  if (error) {
    fs::remove(temporary, error);
    return absl::InternalError(absl::StrCat(path, ": cannot rename the written file into place"));
  }
  local.bytes = writer.bytes();
  if (summary != nullptr) *summary = local;
  return absl::OkStatus();
}

}  // namespace vision::data::synthetic::coco
