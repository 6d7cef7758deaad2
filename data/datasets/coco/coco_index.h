// The COCO instances file in compact form, and its cache shared by the processes of a node.
//
// Compact form: a few flat arrays instead of one heap object per annotation: categories
// sorted by id, images sorted by id each with a range of annotations (grouped by image, in
// file order within an image), polygons as offsets into one array of double coordinates, RLE
// runs in one array of uint32, names in one string. What it holds is checked as CocoDataset
// documents and kept as the file states it (boxes, coordinates in double, the "area"):
// Object() rebuilds the core::ObjectInstance the dataset hands out for training, clamped to
// the image, and GroundTruthObject() the one evaluators score, unchanged. train2017's 860,000
// annotations took about 200 MB this way with float coordinates and clamped float boxes
// (format 3), against about 2 GB for a JSON tree; format 4's doubles add about as much again
// for the coordinates and 24 bytes per annotation (estimated, not re-measured).
//
// Parsing: simdjson's On-Demand API straight into those arrays (no DOM: its tape would be
// twice the file), over the file a window at a time: a scan cuts the root object's lists into
// runs of whole elements of about kCocoParseWindowBytes, and simdjson parses one run at a time
// (see "Windows" in coco_index.cc), so that neither a copy of the file nor simdjson's index of
// all of it (4 bytes per structural character) is held: the arrays being built are most of
// the memory. Measured against the former nlohmann tree and pycocotools on a train2017-shaped
// file, see benchmarks/coco_load.sh. On-Demand is compiled into
// this file for the build's target, which with the project's flags is simdjson's portable
// "fallback" kernel: a walk over the 473 MB file built with -mavx2 (its "haswell" kernel) took
// 0.85x the time, too little to make the binary need AVX2. The rules and messages are
// the former reader's (coco_reference_reader.cc, which the tests compare against): semantic
// errors name the file, the annotation id and the image id; a syntax error is located by
// re-reading the file with nlohmann's SAX parser (no tree), so that it names the byte as
// before.
//
// Cache: the same arrays as one file (a header with the key, a table of sections, the
// sections 8-byte aligned), memory-mapped read-only, so the ranks of a node share one copy
// in the page cache. Its key is the source's size, modification time and a 64-bit hash of
// its bytes, and kCocoIndexFormatVersion. The header holds a 64-bit checksum of the whole
// file (CocoCacheChecksum), computed from the file as written and verified before every
// mapping, through a small buffer (the mapping itself is only touched as samples load): a
// flipped bit anywhere (disk or memory damage, a copy gone wrong) is detected. On
// train2017's 256 MB cache that costs about 0.045 s of CPU per warm load, more than paid for
// by hashing the source in eight lanes (0.065 s less; see benchmarks/coco_load.sh). A cache whose key differs (stale),
// whose size differs from its header's (truncated), whose checksum differs (corrupt), or
// whose sections fail the bounds checks (a writer's bug) is never used: it is rebuilt,
// replaced atomically, with a one-line notice on stderr naming it and why.
//
// Who builds it: datasets are built through the plugin registry without the process group,
// so the ranks agree through the file system: an flock() on "<cache>.lock" beside the cache.
// A process first maps a valid cache without locking (the cache only ever appears by an
// atomic rename, so a valid one is complete); if there is none, it takes the lock (polling,
// for at most the configured wait), looks again (another rank may have built it meanwhile)
// and else builds it: temporary file, fsync, rename, fsync of the directory. The first rank
// to arrive builds and the others wait on the lock and then map what it wrote. A lock dies
// with its process, so a killed builder leaves no stale lock; a wait that runs out fails
// naming the cache and the lock. This needs no LOCAL_RANK and works for any launcher, and
// for several datasets on the same file.
//
// Where: next to the annotation file ("<file>.index"), or under cache_dir when one is set
// ("<stem>-<hash of the absolute path>.index"). A valid cache is mapped wherever it is, on a
// read-only file system too (a cache built once beside a shared, read-only dataset). To build
// one, when the annotation directory is not writable the default cache directory
// ($XDG_CACHE_HOME or ~/.cache, /vision-train/coco) is used instead (said in
// CocoIndex::report()), and when no directory is writable the index is parsed into memory on
// every load, with a notice on stderr naming the directories and how to set cache_dir.
#ifndef VISION_DATA_DATASETS_COCO_COCO_INDEX_H_
#define VISION_DATA_DATASETS_COCO_COCO_INDEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/sample.h"

namespace vision::data::datasets::coco {

// Coordinates may lie this fraction of the image's size beyond its border and are clamped
// (see coco_dataset.h); the same rule as ICDAR2015's.
inline constexpr double kMaxOutsideFraction = 0.5;

// Bump on any change of the records, the sections or the reading rules: older caches are
// then rebuilt.
inline constexpr uint32_t kCocoIndexFormatVersion = 4;

struct CocoCategoryRecord {
  int64_t id;
  uint64_t name_begin;  // into names()
  uint32_t name_size;
  uint32_t unused;
};

struct CocoImageRecord {
  int64_t id;
  uint64_t name_begin;  // file_name, into names()
  uint32_t name_size;
  int32_t width;
  int32_t height;
  uint32_t num_annotations;
  uint64_t first_annotation;  // into annotations()
};

enum CocoMaskKind : uint8_t { kNoMask = 0, kPolygonMask = 1, kRleMask = 2 };

struct CocoAnnotationRecord {
  int64_t id;
  double box[4];  // x, y, width, height, as the file states them (not clamped)
  double area;    // the file's "area" (what COCOeval's area ranges use); -1 when it has none
  int32_t label;  // index of the category among the categories sorted by id
  uint8_t is_crowd;
  uint8_t mask;  // CocoMaskKind
  uint16_t unused;
  // kPolygonMask: polygons [mask_begin, mask_end), whose coordinates are
  // coords()[polygon_offsets()[p], polygon_offsets()[p + 1]); kRleMask: the runs
  // rle_counts()[mask_begin, mask_end) of an image-sized mask.
  uint64_t mask_begin;
  uint64_t mask_end;
};

static_assert(sizeof(CocoCategoryRecord) == 24);
static_assert(sizeof(CocoImageRecord) == 40);
static_assert(sizeof(CocoAnnotationRecord) == 72);

// The arrays while they are being built (and the index's storage when there is no cache).
struct CocoIndexArrays {
  std::vector<CocoCategoryRecord> categories;
  std::vector<CocoImageRecord> images;
  std::vector<CocoAnnotationRecord> annotations;
  std::vector<uint64_t> polygon_offsets{0};
  std::vector<double> coords;
  std::vector<uint32_t> rle_counts;
  std::string names;
  // False for a file without an "annotations" key (an image-info file such as
  // image_info_test2017.json), as opposed to one whose annotation list is empty.
  bool has_annotations = true;
};

// Identifies the source file a cache was built from.
struct CocoSourceKey {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t content_hash = 0;
};

struct CocoCacheOptions {
  bool enabled = true;
  // Empty: next to the annotation file, else the default cache directory.
  std::string cache_dir;
  // Sources smaller than this are parsed every time (faster than a cache for small files).
  int64_t min_source_bytes = 16 << 20;
  // How long a process waits for another one building the cache.
  double wait_seconds = 600;
};

class CocoIndex {
 public:
  absl::Span<const CocoCategoryRecord> categories() const { return categories_; }
  absl::Span<const CocoImageRecord> images() const { return images_; }
  absl::Span<const CocoAnnotationRecord> annotations() const { return annotations_; }
  absl::Span<const uint64_t> polygon_offsets() const { return polygon_offsets_; }
  absl::Span<const double> coords() const { return coords_; }
  absl::Span<const uint32_t> rle_counts() const { return rle_counts_; }
  // Whether the file has an "annotations" key (see CocoIndexArrays::has_annotations).
  bool has_annotations() const { return has_annotations_; }
  absl::string_view Name(const CocoCategoryRecord& category) const {
    return names_.substr(category.name_begin, category.name_size);
  }
  absl::string_view Name(const CocoImageRecord& image) const {
    return names_.substr(image.name_begin, image.name_size);
  }
  absl::Span<const CocoAnnotationRecord> AnnotationsOf(const CocoImageRecord& image) const {
    return annotations_.subspan(image.first_annotation, image.num_annotations);
  }
  // The annotation as CocoDataset hands it out for training: box corners and polygon vertices
  // clamped to the image (coordinates in float).
  core::ObjectInstance Object(const CocoAnnotationRecord& annotation,
                              const CocoImageRecord& image) const;
  // The annotation as the file states it, for evaluators (CocoDataset::GroundTruth): the box
  // unclamped, the file's area, and the mask as pycocotools' annToRLE makes it: polygons
  // rasterised from their double coordinates (frPyObjects, merged), RLE as stored.
  core::ObjectInstance GroundTruthObject(const CocoAnnotationRecord& annotation,
                                         const CocoImageRecord& image) const;

  // Where the arrays live: the cache file when mapped, else empty.
  const std::string& cache_path() const { return cache_path_; }
  // What happened on opening: "read from <cache>", "built <cache> (stale: ...)", "in memory
  // (...)"; one line for logs and Describe().
  const std::string& report() const { return report_; }

  // The arrays of `arrays`, owned by the index.
  static CocoIndex FromArrays(CocoIndexArrays arrays);
  // Maps a cache file read-only and checks it against `expected_key` (see ReadCacheKey);
  // the message says why a cache is unusable (stale, truncated, older format ...).
  static absl::StatusOr<CocoIndex> MapCache(const std::string& cache_path,
                                            const CocoSourceKey& expected_key);

 private:
  // Label, crowd flag, id and an RLE mask: what Object() and GroundTruthObject() share.
  core::ObjectInstance ObjectWithoutGeometry(const CocoAnnotationRecord& annotation,
                                             const CocoImageRecord& image) const;

  std::shared_ptr<const void> storage_;
  absl::Span<const CocoCategoryRecord> categories_;
  absl::Span<const CocoImageRecord> images_;
  absl::Span<const CocoAnnotationRecord> annotations_;
  absl::Span<const uint64_t> polygon_offsets_;
  absl::Span<const double> coords_;
  absl::Span<const uint32_t> rle_counts_;
  absl::string_view names_;
  bool has_annotations_ = true;
  std::string cache_path_;
  std::string report_;

  friend absl::StatusOr<CocoIndex> OpenCocoIndex(const std::string&, const CocoCacheOptions&);
};

// The error for a file whose lists and objects nest deeper than core::kMaxNestingDepth, with
// the byte offset of the first bracket too deep (core/nesting.h).
absl::Status CocoNestingError(const std::string& json_path, uint64_t offset);

// The checksum a cache file's header holds: of its `size` bytes, the checksum field read as 0.
// Exposed for tests that forge caches.
uint64_t CocoCacheChecksum(const char* file, uint64_t size);

// Size and modification time from stat(), the hash from reading the file in chunks (no
// copy of it stays in memory).
absl::StatusOr<CocoSourceKey> ReadSourceKey(const std::string& json_path);

// How much of a list simdjson indexes at a time when parsing (see "Parsing" above).
inline constexpr uint64_t kCocoParseWindowBytes = 4 << 20;

// Parses and checks the JSON file into compact arrays; `key` (if not null) receives the
// file's key, hashed from the bytes parsed. A file whose size or modification time changes
// while it is parsed fails (its windows are read twice: by the scan, then for simdjson).
// `window_bytes` changes only memory and speed (the tests make it small to put window boundaries
// everywhere).
absl::StatusOr<CocoIndexArrays> ParseCocoJson(const std::string& json_path,
                                              CocoSourceKey* key = nullptr,
                                              uint64_t window_bytes = kCocoParseWindowBytes);

// Writes `arrays` as a cache file for `key`, atomically (temporary file, fsync, rename,
// fsync of the directory).
absl::Status WriteCocoCache(const CocoIndexArrays& arrays, const CocoSourceKey& key,
                            const std::string& cache_path);

// The default cache directory: $XDG_CACHE_HOME/vision-train/coco, else
// $HOME/.cache/vision-train/coco.
std::string DefaultCocoCacheDir();

// The cache path for `json_path` under `cache_dir`, or next to it when cache_dir is empty.
std::string CocoCachePath(const std::string& json_path, const std::string& cache_dir);

// The index of `json_path`: from the cache when it is valid, else parsed (and cached, see
// the header comment).
absl::StatusOr<CocoIndex> OpenCocoIndex(const std::string& json_path,
                                        const CocoCacheOptions& options);

}  // namespace vision::data::datasets::coco

#endif  // VISION_DATA_DATASETS_COCO_COCO_INDEX_H_
