#include "data/datasets/coco/coco_index.h"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/nesting.h"
#include "core/run_length_mask.h"
#include "core/status_macros.h"
#include "core/status_util.h"

namespace vision::data::datasets::coco {
namespace {

namespace fs = std::filesystem;
namespace od = simdjson::ondemand;

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

std::string ErrnoText() { return std::strerror(errno); }

// ---------------------------------------------------------------------------------------------
// Hashes: 64-bit words through a multiply-xorshift, giving the same value whether the bytes
// come in one buffer or in chunks (every chunk but the last a multiple of 8 bytes).

// One chain: names the cache file of a path under cache_dir (kept as it was, so that caches
// of an older format are replaced in place, not left beside new ones).
class Hasher {
 public:
  void Update(const char* data, size_t size) {
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t word;
      std::memcpy(&word, data + i, 8);
      Mix(word);
    }
    if (i < size) {
      uint64_t word = 0;
      std::memcpy(&word, data + i, size - i);
      Mix(word ^ (static_cast<uint64_t>(size - i) << 56));
    }
    length_ += size;
  }
  uint64_t Finish() const {
    uint64_t h = state_ ^ length_;
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
  }

 private:
  void Mix(uint64_t word) {
    state_ = (state_ ^ word) * 0x9e3779b97f4a7c15ULL;
    state_ ^= state_ >> 29;
  }
  uint64_t state_ = 0x243f6a8885a308d3ULL;
  uint64_t length_ = 0;
};

// The same mixing in kLanes independent chains (word i goes to chain i % kLanes), so that
// the multiplications overlap: about twice the speed of one chain (8 against 4 GB/s on this
// machine), for the source files' key and the cache's checksum. A step maps different words
// to different states, and later steps and the final combination of the chains are
// bijections of a chain's state, so a change confined to one 8-byte word (any flipped bit,
// say) always changes the hash; other changes go unnoticed with odds of about 2^-64.
class WideHasher {
 public:
  void Update(const char* data, size_t size) {
    size_t i = 0;
    while (lane_ != 0 && i + 8 <= size) i += MixAt(data + i);
    for (; i + 8 * kLanes <= size; i += 8 * kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        uint64_t word;
        std::memcpy(&word, data + i + 8 * l, 8);
        lanes_[l] = Mix(lanes_[l], word);
      }
    }
    while (i + 8 <= size) i += MixAt(data + i);
    if (i < size) {
      uint64_t word = 0;
      std::memcpy(&word, data + i, size - i);
      lanes_[lane_] = Mix(lanes_[lane_], word ^ (static_cast<uint64_t>(size - i) << 56));
      lane_ = (lane_ + 1) % kLanes;
    }
    length_ += size;
  }
  uint64_t Finish() const {
    uint64_t h = 0x243f6a8885a308d3ULL ^ length_;
    for (int l = 0; l < kLanes; ++l) h = Mix(h, lanes_[l]);
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
  }

 private:
  static constexpr int kLanes = 8;
  static uint64_t Mix(uint64_t state, uint64_t word) {
    state = (state ^ word) * 0x9e3779b97f4a7c15ULL;
    return state ^ (state >> 29);
  }
  size_t MixAt(const char* p) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    lanes_[lane_] = Mix(lanes_[lane_], word);
    lane_ = (lane_ + 1) % kLanes;
    return 8;
  }
  uint64_t lanes_[kLanes] = {1, 2, 3, 4, 5, 6, 7, 8};
  int lane_ = 0;
  uint64_t length_ = 0;
};

// Bytes of a buffer that reads a file of `file_size` bytes in chunks for the hash: `cap` (a
// multiple of 8) for large files, the size rounded up to 8 for small ones, so that a small file
// does not pay for zeroing or faulting in a large buffer.
size_t ReadBufferBytes(size_t cap, uint64_t file_size) {
  const uint64_t rounded = std::max<uint64_t>(8, (file_size + 7) / 8 * 8);
  return static_cast<size_t>(std::min<uint64_t>(cap, rounded));
}

absl::StatusOr<CocoSourceKey> StatKey(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot stat the file: ", ErrnoText()));
  }
  CocoSourceKey key;
  key.size = static_cast<uint64_t>(st.st_size);
  key.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return key;
}

// ---------------------------------------------------------------------------------------------
// Parsing.

// The end of the JSON value that starts at `p` (for excerpts in messages).
const char* ValueEnd(const char* p, const char* end) {
  int depth = 0;
  bool in_string = false;
  for (const char* q = p; q < end; ++q) {
    const char c = *q;
    if (in_string) {
      if (c == '\\') {
        ++q;
      } else if (c == '"') {
        in_string = false;
        if (depth == 0) return q + 1;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        ++depth;
        break;
      case ']':
      case '}':
        if (--depth <= 0) return depth == 0 ? q + 1 : q;
        break;
      case ',':
        if (depth == 0) return q;
        break;
      case ' ':
      case '\n':
      case '\r':
      case '\t':
        if (depth == 0 && q > p) return q;
        break;
      default:
        break;
    }
  }
  return end;
}

// Reports where nlohmann's parser (the former reader's) finds a syntax error, so that the
// message names the same byte as before; reads without building a tree.
class SyntaxLocator : public nlohmann::json::json_sax_t {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::json::exception& e) override {
    message = absl::StrCat("malformed JSON at byte ", position, ": ", e.what());
    return false;
  }
  std::string message;
};

// ---------------------------------------------------------------------------------------------
// Windows: the file is parsed a piece at a time.
//
// simdjson's On-Demand parser wants its whole input in one padded buffer and indexes every
// structural character in it (4 bytes each: for COCO's lists of numbers about the file's size
// again), so parsing train2017's 473 MB at once held about 1 GB besides the arrays being
// built. Instead:
//
// 1. JsonParser::Scan reads the file once through a small buffer, hashes it for the cache key
//    and feeds it to RootScanner, which finds the fields of the root object. The value of each
//    field is cut into windows: a list ("images", "annotations", ...) into runs of whole
//    elements of about `window_bytes` each (an element longer than that is a run of its own),
//    any other value into one window holding it. The scan follows strings (with their escapes)
//    and brackets only; the syntax inside a window is left to simdjson, as when it read the
//    whole file.
// 2. JsonParser::ForEachElement reads each window again (pread) into one padded buffer as
//    "[" window "]" and hands it to simdjson as a document of its own: one window is indexed
//    at a time, and the parser's buffers grow to the largest window only.
//
// The commas the scan cut at are checked there: every window of a list that was cut holds an
// element ("[1,,2]" or "[1,]" would otherwise read as [1, 2] and [1]). A file that the scan or
// simdjson finds malformed is read again by nlohmann's parser (FindSyntaxError), so that the
// message and its byte offset in the file are the former reader's, wherever the windows lie.

struct ByteRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
};

using ByteTable = std::array<bool, 256>;

constexpr ByteTable Stops(const char* bytes) {
  ByteTable table{};
  for (const char* b = bytes; *b != '\0'; ++b) table[static_cast<unsigned char>(*b)] = true;
  return table;
}

struct RootField {
  ByteRange key;         // with its quotes
  bool is_list = false;  // the value starts with '['
  // A list: runs of whole elements, without the brackets and the commas between runs; any
  // other value: the value.
  std::vector<ByteRange> windows;
};

class RootScanner {
 public:
  enum Result { kOk, kNotAnObject, kMalformed, kTooDeep };

  explicit RootScanner(uint64_t window_bytes)
      : window_bytes_(std::max<uint64_t>(window_bytes, 1)) {}

  // The next `size` bytes of the file. False once the file cannot be a JSON object: the rest
  // need not be fed.
  bool Feed(const char* data, size_t size) {
    const char* p = data;
    const char* const end = data + size;
    auto at = [&](const char* q) { return offset_ + static_cast<uint64_t>(q - data); };
    while (p < end && state_ != kFailed && state_ != kNotObject && state_ != kNestedTooDeep) {
      if (in_string_) {
        if (escaped_) {
          escaped_ = false;
          ++p;
          continue;
        }
        p = Skip(p, end, kStringBytes);
        if (p == end) break;
        if (*p == '\\') {
          escaped_ = true;
        } else {
          in_string_ = false;
          if (stack_.size() == 1) EndRootString(at(p) + 1);
        }
        ++p;
        continue;
      }
      if (stack_.size() >= 2) {  // inside a field's list or object
        p = Skip(p, end, stack_.size() == 2 && field_.is_list ? kListBytes : kValueBytes);
        if (p == end) break;
        switch (*p) {
          case '"':
            in_string_ = true;
            break;
          case '[':
          case '{':
            // The one place where depth grows inside a field: the guard against input that
            // would exhaust the stack of a recursive pass (core/nesting.h).
            stack_.push_back(*p == '[' ? ']' : '}');
            if (stack_.size() > static_cast<size_t>(core::kMaxNestingDepth)) {
              state_ = kNestedTooDeep;
              too_deep_at_ = at(p);
            }
            break;
          case ',':  // between two elements of the field's list
            if (at(p) - window_begin_ >= window_bytes_) {
              field_.windows.push_back({window_begin_, at(p)});
              window_begin_ = at(p) + 1;
            }
            break;
          default:  // ']' or '}'
            if (*p != stack_.back()) {
              state_ = kFailed;
              break;
            }
            stack_.pop_back();
            if (stack_.size() == 1) {
              field_.windows.push_back(field_.is_list ? ByteRange{window_begin_, at(p)}
                                                      : ByteRange{value_begin_, at(p) + 1});
              EndField();
            }
            break;
        }
        ++p;
        continue;
      }
      RootByte(*p, at(p));
      ++p;
    }
    offset_ += size;
    return state_ != kFailed && state_ != kNotObject && state_ != kNestedTooDeep;
  }

  // After the last byte.
  Result Finish() {
    if (state_ == kNotObject) return kNotAnObject;
    if (state_ == kNestedTooDeep) return kTooDeep;
    return state_ == kAfterRoot && !in_string_ ? kOk : kMalformed;
  }

  std::vector<RootField> TakeFields() { return std::move(fields_); }
  // With kTooDeep: the offset of the bracket one deeper than core::kMaxNestingDepth.
  uint64_t too_deep_at() const { return too_deep_at_; }

 private:
  enum State {
    kBeforeRoot,
    kKeyOrEnd,  // after "{"
    kKey,       // after ","
    kInKey,
    kColon,
    kValue,
    kInStringValue,
    kInScalarValue,
    kAfterValue,
    kAfterRoot,
    kNotObject,
    kNestedTooDeep,
    kFailed,
  };

  // The bytes that stop a skip: in a string; between the elements of a field's list (the
  // commas count there); elsewhere inside a field's value.
  static constexpr ByteTable kStringBytes = Stops("\"\\");
  static constexpr ByteTable kListBytes = Stops("\"[]{},");
  static constexpr ByteTable kValueBytes = Stops("\"[]{}");

  static const char* Skip(const char* p, const char* end, const ByteTable& stops) {
    while (p < end && !stops[static_cast<unsigned char>(*p)]) ++p;
    return p;
  }

  static bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

  // A byte of the root object outside strings and outside its fields' lists and objects.
  void RootByte(char c, uint64_t at) {
    if (state_ == kInScalarValue) {  // a number, true, false or null: ends at what cannot be in it
      if (!IsSpace(c) && std::strchr(",:[]{}\"", c) == nullptr) return;
      field_.windows.push_back({value_begin_, at});
      EndField();
    }
    if (IsSpace(c)) return;
    switch (state_) {
      case kBeforeRoot:
        // A UTF-8 byte order mark may come first, as nlohmann's parser allows.
        if (at < 3 && at == bom_bytes_ && c == "\xEF\xBB\xBF"[at]) {
          ++bom_bytes_;
          return;
        }
        if (c != '{') {
          state_ = kNotObject;
          return;
        }
        stack_.push_back('}');
        state_ = kKeyOrEnd;
        return;
      case kKeyOrEnd:
      case kKey:
        if (c == '"') {
          in_string_ = true;
          field_.key.begin = at;
          state_ = kInKey;
        } else if (c == '}' && state_ == kKeyOrEnd) {
          stack_.pop_back();
          state_ = kAfterRoot;
        } else {
          state_ = kFailed;
        }
        return;
      case kColon:
        state_ = c == ':' ? kValue : kFailed;
        return;
      case kValue:
        value_begin_ = at;
        if (c == '"') {
          in_string_ = true;
          state_ = kInStringValue;
        } else if (c == '[' || c == '{') {
          stack_.push_back(c == '[' ? ']' : '}');
          field_.is_list = c == '[';
          window_begin_ = at + 1;
          state_ = kAfterValue;  // once Feed's inner loop has read the value to its end
        } else if (std::strchr(",:]}", c) != nullptr) {
          state_ = kFailed;
        } else {
          state_ = kInScalarValue;
        }
        return;
      case kAfterValue:
        if (c == ',') {
          state_ = kKey;
        } else if (c == '}') {
          stack_.pop_back();
          state_ = kAfterRoot;
        } else {
          state_ = kFailed;
        }
        return;
      default:  // kAfterRoot: only white space may follow
        state_ = kFailed;
        return;
    }
  }

  // The closing quote of a key or of a string value of the root object ends just before `end`.
  void EndRootString(uint64_t end) {
    if (state_ == kInKey) {
      field_.key.end = end;
      state_ = kColon;
    } else {  // kInStringValue
      field_.windows.push_back({value_begin_, end});
      EndField();
    }
  }

  void EndField() {
    fields_.push_back(std::move(field_));
    field_ = RootField();
    state_ = kAfterValue;
  }

  const uint64_t window_bytes_;
  uint64_t offset_ = 0;  // of the next byte fed
  State state_ = kBeforeRoot;
  bool in_string_ = false;
  bool escaped_ = false;  // the previous byte of the string was a backslash
  uint64_t bom_bytes_ = 0;
  std::vector<char> stack_;  // the closing bracket of each open list and object
  RootField field_;          // being read
  uint64_t value_begin_ = 0;
  uint64_t window_begin_ = 0;
  uint64_t too_deep_at_ = 0;
  std::vector<RootField> fields_;
};

class JsonParser {
 public:
  // `fd` reads `json_path`, of `size` bytes.
  JsonParser(const std::string& json_path, int fd, uint64_t size, uint64_t window_bytes)
      : json_path_(json_path), fd_(fd), size_(size), window_bytes_(window_bytes) {}

  // `hash` (if not null) receives the hash of the file's bytes.
  absl::StatusOr<CocoIndexArrays> Parse(uint64_t* hash) {
    absl::Status status = Scan(hash);
    if (!nesting_error_.ok()) return nesting_error_;
    if (status.ok()) status = ParseDocument();
    if (!io_error_.ok()) return io_error_;
    if (syntax_error_ != simdjson::SUCCESS) return SyntaxError(syntax_error_);
    if (!status.ok()) {
      // The former reader parsed the whole file before looking at it, so a syntax error
      // anywhere comes first. Only on this error path is the file read twice.
      if (std::optional<absl::Status> syntax = FindSyntaxError(); syntax.has_value()) {
        return *syntax;
      }
      return status;
    }
    return std::move(arrays_);
  }

 private:
  // Reads the file once through a small buffer: hashes it and finds the root's fields and
  // their windows (RootScanner).
  absl::Status Scan(uint64_t* hash) {
    RootScanner scanner(window_bytes_);
    WideHasher hasher;
    // A multiple of 8 bytes, as the hash requires; not zeroed, and no larger than the file.
    const size_t capacity = ReadBufferBytes(1 << 20, size_);
    const std::unique_ptr<char[]> buffer(new char[capacity]);
    for (uint64_t done = 0; done < size_;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(capacity, size_ - done));
      if (absl::Status read = ReadAt(buffer.get(), want, done); !read.ok()) {
        io_error_ = read;
        return read;
      }
      if (hash != nullptr) hasher.Update(buffer.get(), want);
      if (!scanner.Feed(buffer.get(), want)) break;  // not JSON: the hash will not be used
      done += want;
    }
    if (hash != nullptr) *hash = hasher.Finish();
    switch (scanner.Finish()) {
      case RootScanner::kOk:
        fields_ = scanner.TakeFields();
        return absl::OkStatus();
      case RootScanner::kNotAnObject:
        return InFile("", Invalid("the top level is not an object with \"images\", "
                                  "\"annotations\" and \"categories\""));
      case RootScanner::kTooDeep:
        nesting_error_ = CocoNestingError(json_path_, scanner.too_deep_at());
        return nesting_error_;
      case RootScanner::kMalformed:
        break;
    }
    return Fail(simdjson::TAPE_ERROR);
  }

  // `size` bytes of the file from `offset`.
  absl::Status ReadAt(char* data, size_t size, uint64_t offset) const {
    size_t filled = 0;
    while (filled < size) {
      const ssize_t n = ::pread(fd_, data + filled, size - filled, offset + filled);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return absl::DataLossError(absl::StrCat(json_path_, ": read error: ", ErrnoText()));
      if (n == 0) {
        return absl::DataLossError(absl::StrCat(json_path_, ": the file shrank while being read"));
      }
      filled += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // Reads `window` into the padded buffer as "[" window "]" and starts simdjson on it.
  absl::Status LoadWindow(const ByteRange& window, od::document* doc) {
    const size_t size = static_cast<size_t>(window.size()) + 2;
    if (window_capacity_ < size + simdjson::SIMDJSON_PADDING) {
      // Room for the runs that follow (each a little over window_bytes_), so that the buffers
      // are not made again for each: freed and made again they would leave the heap larger.
      // Never more than the whole file needs: simdjson's buffers for a capacity are several
      // times its size, which a small file should not pay for.
      const uint64_t room = std::min<uint64_t>(window_bytes_ + window_bytes_ / 4, size_ + 2);
      window_capacity_ =
          std::max<size_t>(size, static_cast<size_t>(room)) + simdjson::SIMDJSON_PADDING;
      window_.reset();  // before the new one: the old one may be large
      window_.reset(new char[window_capacity_]);
      if (auto error = parser_.allocate(window_capacity_)) return Fail(error);
    }
    char* text = window_.get();
    text[0] = '[';
    if (absl::Status read = ReadAt(text + 1, size - 2, window.begin); !read.ok()) {
      io_error_ = read;
      return absl::InternalError("read");  // ends the walk like a syntax error
    }
    text[size - 1] = ']';
    std::memset(text + size, 0, simdjson::SIMDJSON_PADDING);
    window_end_ = text + size;
    if (auto error = parser_.iterate(text, size, window_capacity_).get(*doc)) return Fail(error);
    return absl::OkStatus();
  }

  void FreeWindows() {
    parser_ = od::parser();
    window_.reset();
    window_capacity_ = 0;
    window_end_ = nullptr;
  }

  // Calls visit(element) for each element of the list whose runs of elements are `windows`
  // (see RootScanner; one window holding a value that is not a list gives that value). A
  // simdjson error, or a non-OK status from `visit`, ends the walk.
  template <typename Visit>
  absl::Status ForEachElement(absl::Span<const ByteRange> windows, Visit visit) {
    for (const ByteRange& window : windows) {
      od::document doc;
      VISION_RETURN_IF_ERROR(LoadWindow(window, &doc));
      od::array list;
      if (auto error = doc.get_array().get(list)) return Fail(error);
      size_t count = 0;
      for (auto element_result : list) {
        od::value element;
        if (auto error = element_result.get(element)) return Fail(error);
        ++count;
        VISION_RETURN_IF_ERROR(visit(element));
      }
      // A run between commas that the scan cut at is empty: "[1,,2]" or "[1,]". (Nothing can
      // follow the list: the scan ends a run at the first bracket closing it.)
      if (count == 0 && windows.size() > 1) return Fail(simdjson::TAPE_ERROR);
    }
    return absl::OkStatus();
  }

  // The root field's key, unescaped.
  absl::Status Key(const RootField& field, std::string* key) {
    return ForEachElement({field.key}, [&](od::value& value) -> absl::Status {
      std::string_view text;
      if (auto error = value.get_string().get(text)) return Fail(error);
      key->assign(text.data(), text.size());
      return absl::OkStatus();
    });
  }

  // Every message below names the file, and the place in it unless `where` is empty.
  absl::Status InFile(absl::string_view where, const absl::Status& status) const {
    return core::WithContext(where.empty() ? json_path_ : absl::StrCat(json_path_, ": ", where),
                             status);
  }

  // A simdjson error that is not about types: the JSON itself is broken. Records it; Parse()
  // turns it into the message.
  absl::Status Fail(simdjson::error_code error) {
    if (syntax_error_ == simdjson::SUCCESS) syntax_error_ = error;
    return absl::InternalError("syntax");
  }

  // The former reader's message for a file that is not valid JSON, if it is not.
  std::optional<absl::Status> FindSyntaxError() const {
    // The whole file, mapped for nlohmann's parser.
    void* mapped = size_ == 0 ? MAP_FAILED : ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (size_ != 0 && mapped == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat(
          json_path_, ": cannot map the file to locate a syntax error: ", ErrnoText()));
    }
    const char* text = size_ == 0 ? "" : static_cast<const char*>(mapped);
    struct Unmap {
      uint64_t size;
      void operator()(void* p) const { ::munmap(p, size); }
    };
    const std::unique_ptr<void, Unmap> unmap(size_ == 0 ? nullptr : mapped, Unmap{size_});
    SyntaxLocator locator;
    try {
      nlohmann::json::sax_parse(text, text + size_, &locator);
    } catch (const nlohmann::json::exception& e) {
      // E.g. a number too large for a double.
      return absl::InvalidArgumentError(absl::StrCat(json_path_, ": unreadable JSON: ", e.what()));
    }
    if (!locator.message.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(json_path_, ": ", locator.message));
    }
    return std::nullopt;
  }

  absl::Status SyntaxError(simdjson::error_code error) const {
    if (std::optional<absl::Status> syntax = FindSyntaxError(); syntax.has_value()) {
      return *syntax;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(json_path_, ": unreadable JSON: ", simdjson::error_message(error)));
  }

  // A value as it appears in the file, cut so that a huge array stays readable; formatted
  // like the former reader's (nlohmann's dump()). Only on error paths.
  std::string Excerpt(const char* start) const {
    constexpr size_t kMax = 60;
    const char* end = ValueEnd(start, window_end_);
    std::string out;
    try {
      out = nlohmann::json::parse(start, end).dump();
    } catch (const nlohmann::json::exception&) {
      out.assign(start, end);
    }
    if (out.size() > kMax) out = absl::StrCat(out.substr(0, kMax), "...");
    return out;
  }

  const char* Start(od::value& value) { return value.raw_json_token().data(); }

  absl::Status Type(od::value& value, od::json_type* type) {
    if (auto error = value.type().get(*type)) return Fail(error);
    return absl::OkStatus();
  }

  // The former AsInteger: integers, and floats with an integral value (some exporters write 7.0).
  absl::Status Integer(od::value& value, absl::string_view what, int64_t* out) {
    const char* start = Start(value);
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(value, &type));
    if (type == od::json_type::number) {
      od::number_type number_type;
      if (auto error = value.get_number_type().get(number_type)) return Fail(error);
      if (number_type == od::number_type::signed_integer) {
        if (auto error = value.get_int64().get(*out)) return Fail(error);
        return absl::OkStatus();
      }
      if (number_type == od::number_type::unsigned_integer) {
        uint64_t v;
        if (auto error = value.get_uint64().get(v)) return Fail(error);
        if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          *out = static_cast<int64_t>(v);
          return absl::OkStatus();
        }
      } else {
        double v;
        if (auto error = value.get_double().get(v)) return Fail(error);
        if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 0x1.0p53) {
          *out = static_cast<int64_t>(v);
          return absl::OkStatus();
        }
      }
    }
    return Invalid(absl::StrCat(what, " is ", Excerpt(start), ", not an integer"));
  }

  absl::Status Number(od::value& value, absl::string_view what, double* out) {
    const char* start = Start(value);
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(value, &type));
    if (type != od::json_type::number) {
      return Invalid(absl::StrCat(what, " is ", Excerpt(start), ", not a finite number"));
    }
    if (auto error = value.get_double().get(*out)) return Fail(error);
    return absl::OkStatus();
  }

  // A syntax error ends the parse at once; a message about the content is kept for the
  // caller to report in the former reader's order.
  static bool IsSyntax(const absl::Status& status) {
    return status.code() == absl::StatusCode::kInternal;
  }

  // Calls visit(key, value) for each field of `object`, in file order; a simdjson error, or a
  // non-OK status from `visit` (the syntax errors that must end the walk), ends it.
  template <typename Visit>
  absl::Status ForEachField(od::object& object, Visit visit) {
    for (auto field_result : object) {
      od::field field;
      if (auto error = std::move(field_result).get(field)) return Fail(error);
      std::string_view key;
      if (auto error = field.unescaped_key().get(key)) return Fail(error);
      VISION_RETURN_IF_ERROR(visit(key, field.value()));
    }
    return absl::OkStatus();
  }

  absl::Status ParseDocument() {
    // Pass 1: categories and images, wherever they are (the official files put the categories
    // last); the annotations wait. Other fields are only checked, as simdjson skipped them when
    // it read the whole file.
    bool has_categories = false;
    bool has_images = false;
    const RootField* annotations = nullptr;
    absl::Status categories_status;
    absl::Status images_status;
    std::string key;
    for (const RootField& field : fields_) {
      VISION_RETURN_IF_ERROR(Key(field, &key));
      if (key == "categories") {
        has_categories = true;
        categories_status = ParseCategories(field);
        if (IsSyntax(categories_status)) return categories_status;
      } else if (key == "images") {
        has_images = true;
        images_status = ParseImages(field);
        if (IsSyntax(images_status)) return images_status;
      } else if (key == "annotations" && annotations == nullptr) {
        annotations = &field;
      } else {
        VISION_RETURN_IF_ERROR(
            ForEachElement(field.windows, [](od::value&) { return absl::OkStatus(); }));
      }
    }
    if (!has_categories) return InFile("", Invalid("missing \"categories\""));
    VISION_RETURN_IF_ERROR(InFile("", categories_status));
    VISION_RETURN_IF_ERROR(FinishCategories());
    if (!has_images) return InFile("", Invalid("missing \"images\""));
    VISION_RETURN_IF_ERROR(InFile("", images_status));
    VISION_RETURN_IF_ERROR(FinishImages());
    if (arrays_.images.empty()) return InFile("", Invalid("\"images\" is empty"));
    // A file without "annotations" (like COCO's image_info_test2017.json) lists images only.
    arrays_.has_annotations = annotations != nullptr;
    if (annotations == nullptr) return absl::OkStatus();

    // Pass 2: the (first) annotations, now that every image and category is known.
    return ParseAnnotations(*annotations);
  }

  // --- categories ---------------------------------------------------------------------------
  // Walks the list `field` (the value of key `key`), calling parse_element(element, index) on
  // each element. A syntax error ends the walk at once; the first other error is kept while the
  // rest of the list is still walked, so that malformed JSON further on is reported first, as
  // the former reader (which parsed the whole file before checking any field) reported it.
  template <typename ParseElement>
  absl::Status ParseList(const RootField& field, absl::string_view key,
                         ParseElement parse_element) {
    if (!field.is_list) return Invalid(absl::StrCat("\"", key, "\" is not a list"));
    absl::Status first_error;
    size_t i = 0;
    VISION_RETURN_IF_ERROR(ForEachElement(field.windows, [&](od::value& element) -> absl::Status {
      if (first_error.ok()) {
        first_error = parse_element(element, i);
        if (IsSyntax(first_error)) return first_error;
      }
      ++i;
      return absl::OkStatus();
    }));
    return first_error;
  }

  absl::Status ParseCategories(const RootField& field) {
    return ParseList(field, "categories",
                     [this](od::value& element, size_t i) { return ParseCategory(element, i); });
  }

  absl::Status ParseCategory(od::value& element, size_t i) {
    const std::string where = absl::StrCat("categories[", i, "]");
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(element, &type));
    if (type != od::json_type::object) return Invalid(absl::StrCat(where, " is not an object"));
    od::object object;
    if (auto error = element.get_object().get(object)) return Fail(error);
    bool has_id = false;
    bool has_name = false;
    int64_t id = 0;
    absl::Status id_status;
    absl::Status name_status;
    std::string_view name;
    VISION_RETURN_IF_ERROR(
        ForEachField(object, [&](std::string_view key, od::value& value) -> absl::Status {
          if (key == "id") {
            has_id = true;
            id_status = Integer(value, "\"id\"", &id);
            if (IsSyntax(id_status)) return id_status;
          } else if (key == "name") {
            has_name = true;
            const char* start = Start(value);
            VISION_RETURN_IF_ERROR(Type(value, &type));
            if (type == od::json_type::string) {
              if (auto error = value.get_string().get(name)) return Fail(error);
            } else {
              name_status = Invalid(absl::StrCat("\"name\" is ", Excerpt(start), ", not a string"));
            }
          }
          return absl::OkStatus();
        }));
    if (!has_id) return core::WithContext(where, Invalid("missing \"id\""));
    VISION_RETURN_IF_ERROR(core::WithContext(where, id_status));
    if (!has_name) return Invalid("missing \"name\"");
    VISION_RETURN_IF_ERROR(core::WithContext(absl::StrCat("category ", id), name_status));
    CocoCategoryRecord record{};
    record.id = id;
    record.name_begin = arrays_.names.size();
    record.name_size = static_cast<uint32_t>(name.size());
    arrays_.names.append(name);
    arrays_.categories.push_back(record);
    return absl::OkStatus();
  }

  absl::Status FinishCategories() {
    std::vector<CocoCategoryRecord>& categories = arrays_.categories;
    if (categories.empty()) {
      return InFile("", Invalid("\"categories\" is empty; a detector needs classes"));
    }
    std::stable_sort(
        categories.begin(), categories.end(),
        [](const CocoCategoryRecord& a, const CocoCategoryRecord& b) { return a.id < b.id; });
    for (size_t i = 1; i < categories.size(); ++i) {
      if (categories[i].id == categories[i - 1].id) {
        return InFile("", Invalid(absl::StrCat("category ", categories[i].id, " is listed twice ('",
                                               NameOf(categories[i - 1]), "' and '",
                                               NameOf(categories[i]), "')")));
      }
    }
    return absl::OkStatus();
  }

  template <typename Record>
  absl::string_view NameOf(const Record& record) const {
    return absl::string_view(arrays_.names).substr(record.name_begin, record.name_size);
  }

  // --- images -------------------------------------------------------------------------------
  absl::Status ParseImages(const RootField& field) {
    return ParseList(field, "images",
                     [this](od::value& element, size_t i) { return ParseImage(element, i); });
  }

  absl::Status ParseImage(od::value& element, size_t i) {
    const std::string where = absl::StrCat("images[", i, "]");
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(element, &type));
    if (type != od::json_type::object) return Invalid(absl::StrCat(where, " is not an object"));
    od::object object;
    if (auto error = element.get_object().get(object)) return Fail(error);
    bool has[3] = {false, false, false};  // id, width, height
    int64_t values[3] = {0, 0, 0};
    absl::Status statuses[3];
    bool has_name = false;
    std::string name_excerpt;
    std::string_view name;
    bool name_ok = false;
    VISION_RETURN_IF_ERROR(
        ForEachField(object, [&](std::string_view key, od::value& value) -> absl::Status {
          const int slot = key == "id" ? 0 : key == "width" ? 1 : key == "height" ? 2 : -1;
          if (slot >= 0) {
            has[slot] = true;
            constexpr const char* kQuoted[3] = {"\"id\"", "\"width\"", "\"height\""};
            statuses[slot] = Integer(value, kQuoted[slot], &values[slot]);
            if (IsSyntax(statuses[slot])) return statuses[slot];
          } else if (key == "file_name") {
            has_name = true;
            const char* start = Start(value);
            VISION_RETURN_IF_ERROR(Type(value, &type));
            if (type == od::json_type::string) {
              if (auto error = value.get_string().get(name)) return Fail(error);
              name_ok = !name.empty();
            }
            if (!name_ok) name_excerpt = Excerpt(start);
          }
          return absl::OkStatus();
        }));
    if (!has[0]) return core::WithContext(where, Invalid("missing \"id\""));
    VISION_RETURN_IF_ERROR(core::WithContext(where, statuses[0]));
    const std::string label = absl::StrCat("image ", values[0]);
    if (!name_ok) {
      return Invalid(absl::StrCat(label, ": \"file_name\" is ", has_name ? name_excerpt : "missing",
                                  ", not a file name"));
    }
    const char* keys[3] = {"id", "width", "height"};
    for (int slot = 1; slot < 3; ++slot) {
      if (!has[slot]) {
        return core::WithContext(label, Invalid(absl::StrCat("missing \"", keys[slot], "\"")));
      }
      VISION_RETURN_IF_ERROR(core::WithContext(label, statuses[slot]));
      if (values[slot] <= 0 || values[slot] > (1 << 16)) {
        return Invalid(absl::StrCat(label, ": \"", keys[slot], "\" is ", values[slot],
                                    "; image sides must be in [1, 65536]"));
      }
    }
    CocoImageRecord record{};
    record.id = values[0];
    record.name_begin = arrays_.names.size();
    record.name_size = static_cast<uint32_t>(name.size());
    record.width = static_cast<int32_t>(values[1]);
    record.height = static_cast<int32_t>(values[2]);
    arrays_.names.append(name);
    arrays_.images.push_back(record);
    return absl::OkStatus();
  }

  absl::Status FinishImages() {
    std::vector<CocoImageRecord>& images = arrays_.images;
    std::stable_sort(
        images.begin(), images.end(),
        [](const CocoImageRecord& a, const CocoImageRecord& b) { return a.id < b.id; });
    image_ids_.reserve(images.size());
    for (size_t i = 0; i < images.size(); ++i) {
      if (i > 0 && images[i].id == images[i - 1].id) {
        return InFile("", Invalid(absl::StrCat("image id ", images[i].id, " is used twice ('",
                                               NameOf(images[i - 1]), "' and '", NameOf(images[i]),
                                               "'); image ids must be unique")));
      }
      image_ids_.push_back(images[i].id);
    }
    return absl::OkStatus();
  }

  // --- annotations --------------------------------------------------------------------------

  // One annotation as read, before it is checked: the former reader checks the fields in a
  // fixed order whatever their order in the file, so each field's problem waits here.
  // Reused from one annotation to the next (no allocation per annotation).
  struct Pending {
    bool has_id, has_image_id, has_category_id, has_crowd, has_bbox, has_segmentation, has_area;
    int64_t id, image_id, category_id;
    bool is_crowd;
    absl::Status id_status, image_id_status, category_status, crowd_status, bbox_status,
        segmentation_status, area_status;
    double bbox[4];
    double area;
    const char* bbox_start;
    CocoMaskKind mask;
    // Polygons: the coordinates of the polygons read whole, and where each ends; a polygon
    // with a problem stops the reading and leaves it in segmentation_status.
    std::vector<double> coords;
    std::vector<size_t> polygon_ends;
    // RLE.
    bool has_size, has_counts;
    absl::Status size_status, counts_status;
    int64_t rle_height, rle_width;
    std::string_view counts_string;
    bool counts_is_string;
    std::vector<uint32_t> runs;

    void Reset() {
      has_id = has_image_id = has_category_id = has_crowd = has_bbox = has_segmentation =
          has_area = false;
      id_status = image_id_status = category_status = crowd_status = bbox_status =
          segmentation_status = area_status = absl::OkStatus();
      area = -1;
      is_crowd = false;
      mask = kNoMask;
      coords.clear();
      polygon_ends.clear();
      has_size = has_counts = false;
      size_status = counts_status = absl::OkStatus();
      counts_is_string = false;
      runs.clear();
    }
  };

  absl::Status ParseAnnotations(const RootField& field) {
    if (!field.is_list) return InFile("", Invalid("\"annotations\" is not a list"));
    // File order; grouped by image at the end.
    std::vector<CocoAnnotationRecord> records;
    std::vector<uint32_t> image_of;
    absl::flat_hash_map<int64_t, uint32_t> seen_ids;
    // Room for what a COCO-like list holds (about 10 bytes of JSON per coordinate, 500 per
    // annotation), so that the arrays do not double, and briefly need twice their size. Pages
    // not written to are never resident.
    const uint64_t bytes = field.windows.back().end - field.windows.front().begin;
    arrays_.coords.reserve(bytes / 6);
    arrays_.polygon_offsets.reserve(bytes / 200);
    records.reserve(bytes / 200);
    image_of.reserve(bytes / 200);
    Pending pending;
    uint32_t i = 0;
    VISION_RETURN_IF_ERROR(ForEachElement(field.windows, [&](od::value& element) -> absl::Status {
      auto where = [i] { return absl::StrCat("annotations[", i, "]"); };
      od::json_type type{};
      VISION_RETURN_IF_ERROR(Type(element, &type));
      if (type != od::json_type::object) return InFile(where(), Invalid("not an object"));
      pending.Reset();
      VISION_RETURN_IF_ERROR(ReadAnnotation(element, &pending));
      if (!pending.has_id) return InFile(where(), Invalid("missing \"id\""));
      if (!pending.id_status.ok()) return InFile(where(), pending.id_status);
      auto label = [&pending] { return absl::StrCat("annotation ", pending.id); };
      if (auto [it, inserted] = seen_ids.emplace(pending.id, i); !inserted) {
        return InFile(label(), Invalid(absl::StrCat("the id is used twice (annotations[",
                                                    it->second, "] and annotations[", i,
                                                    "]); annotation ids must be unique")));
      }
      CocoAnnotationRecord record{};
      record.id = pending.id;
      uint32_t image_index = 0;
      bool image_known = false;
      if (absl::Status status = CheckAnnotation(&pending, &record, &image_index, &image_known);
          !status.ok()) {
        return InFile(
            image_known ? absl::StrCat(label(), " (image ", pending.image_id, ")") : label(),
            status);
      }
      records.push_back(record);
      image_of.push_back(image_index);
      ++i;
      return absl::OkStatus();
    }));
    // Done with simdjson and the ids: their memory goes before the records are copied.
    FreeWindows();
    absl::flat_hash_map<int64_t, uint32_t>().swap(seen_ids);
    // Grouped by image, in file order within an image (a stable counting sort).
    std::vector<CocoImageRecord>& images = arrays_.images;
    for (uint32_t index : image_of) ++images[index].num_annotations;
    uint64_t next = 0;
    for (CocoImageRecord& image : images) {
      image.first_annotation = next;
      next += image.num_annotations;
    }
    std::vector<uint64_t> fill(images.size());
    for (size_t k = 0; k < images.size(); ++k) fill[k] = images[k].first_annotation;
    arrays_.annotations.resize(records.size());
    for (size_t k = 0; k < records.size(); ++k) {
      arrays_.annotations[fill[image_of[k]]++] = records[k];
    }
    return absl::OkStatus();
  }

  // Reads the fields of one annotation into `p` without judging them.
  absl::Status ReadAnnotation(od::value& element, Pending* p) {
    od::object object;
    if (auto error = element.get_object().get(object)) return Fail(error);
    VISION_RETURN_IF_ERROR(
        ForEachField(object, [&](std::string_view key, od::value& value) -> absl::Status {
          absl::Status status;
          if (key == "segmentation") {
            p->has_segmentation = true;
            status = ReadSegmentation(value, p);
          } else if (key == "bbox") {
            p->has_bbox = true;
            status = ReadBox(value, p);
          } else if (key == "id") {
            p->has_id = true;
            p->id_status = status = Integer(value, "\"id\"", &p->id);
          } else if (key == "image_id") {
            p->has_image_id = true;
            p->image_id_status = status = Integer(value, "\"image_id\"", &p->image_id);
          } else if (key == "category_id") {
            p->has_category_id = true;
            p->category_status = status = Integer(value, "\"category_id\"", &p->category_id);
          } else if (key == "iscrowd") {
            p->has_crowd = true;
            status = ReadCrowd(value, p);
          } else if (key == "area") {
            p->has_area = true;
            p->area_status = status = Number(value, "\"area\"", &p->area);
          }
          if (IsSyntax(status)) return status;
          return absl::OkStatus();
        }));
    return absl::OkStatus();
  }

  absl::Status ReadCrowd(od::value value, Pending* p) {
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(value, &type));
    if (type == od::json_type::boolean) {
      if (auto error = value.get_bool().get(p->is_crowd)) return Fail(error);
      return absl::OkStatus();
    }
    int64_t crowd = 0;
    absl::Status status = Integer(value, "\"iscrowd\"", &crowd);
    if (IsSyntax(status)) return status;
    if (status.ok() && crowd != 0 && crowd != 1) {
      status = Invalid(absl::StrCat("\"iscrowd\" is ", crowd, "; use 0 or 1"));
    }
    p->crowd_status = status;
    p->is_crowd = crowd == 1;
    return absl::OkStatus();
  }

  absl::Status ReadBox(od::value value, Pending* p) {
    p->bbox_start = Start(value);
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(value, &type));
    auto shape_error = [&] {
      return Invalid(
          absl::StrCat("\"bbox\" is ", Excerpt(p->bbox_start), ", not [x, y, width, height]"));
    };
    if (type != od::json_type::array) {
      p->bbox_status = shape_error();
      return absl::OkStatus();
    }
    od::array array;
    if (auto error = value.get_array().get(array)) return Fail(error);
    size_t count = 0;
    absl::Status element_status;
    for (auto element_result : array) {
      od::value element;
      if (auto error = element_result.get(element)) return Fail(error);
      if (count < 4 && element_status.ok() &&
          element.get_double().get(p->bbox[count]) != simdjson::SUCCESS) {
        element_status = Number(element, absl::StrCat("bbox[", count, "]"), &p->bbox[count]);
        if (IsSyntax(element_status)) return element_status;
      }
      ++count;
    }
    p->bbox_status = count != 4 ? shape_error() : element_status;
    return absl::OkStatus();
  }

  absl::Status ReadSegmentation(od::value value, Pending* p) {
    const char* start = Start(value);
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(value, &type));
    if (type == od::json_type::array) {
      p->mask = kPolygonMask;
      od::array polygons;
      if (auto error = value.get_array().get(polygons)) return Fail(error);
      size_t i = 0;
      for (auto polygon_result : polygons) {
        od::value polygon;
        if (auto error = polygon_result.get(polygon)) return Fail(error);
        if (p->segmentation_status.ok()) {
          p->segmentation_status = ReadPolygon(polygon, i, p);
          if (IsSyntax(p->segmentation_status)) return p->segmentation_status;
        }
        ++i;
      }
      return absl::OkStatus();
    }
    if (type == od::json_type::object) {
      p->mask = kRleMask;
      od::object rle;
      if (auto error = value.get_object().get(rle)) return Fail(error);
      VISION_RETURN_IF_ERROR(
          ForEachField(rle, [&](std::string_view key, od::value& value) -> absl::Status {
            absl::Status status;
            if (key == "size") {
              p->has_size = true;
              status = ReadRleSize(value, p);
            } else if (key == "counts") {
              p->has_counts = true;
              status = ReadRleCounts(value, p);
            }
            if (IsSyntax(status)) return status;
            return absl::OkStatus();
          }));
      return absl::OkStatus();
    }
    p->segmentation_status =
        Invalid(absl::StrCat("\"segmentation\" is ", Excerpt(start),
                             "; expected a list of polygons or an RLE {\"counts\", \"size\"}"));
    return absl::OkStatus();
  }

  absl::Status ReadPolygon(od::value& polygon, size_t i, Pending* p) {
    const char* start = Start(polygon);
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(polygon, &type));
    auto what = [i] { return absl::StrCat("segmentation polygon ", i); };
    if (type != od::json_type::array) {
      return Invalid(
          absl::StrCat(what(), " is ", Excerpt(start), ", not a flat list [x1, y1, x2, y2, ...]"));
    }
    od::array flat;
    if (auto error = polygon.get_array().get(flat)) return Fail(error);
    const size_t begin = p->coords.size();
    absl::Status element_status;
    size_t count = 0;
    for (auto element_result : flat) {
      od::value element;
      if (auto error = element_result.get(element)) return Fail(error);
      double v = 0;
      // The common case first: a number, read without the checks' overhead.
      if (element_status.ok() && element.get_double().get(v) == simdjson::SUCCESS) {
        p->coords.push_back(v);
      } else if (element_status.ok()) {
        element_status = Number(element, absl::StrCat(what(), "[", count, "]"), &v);
        if (IsSyntax(element_status)) return element_status;
      }
      ++count;
    }
    // The former reader's order: the count first, then the numbers.
    if (count % 2 != 0) {
      p->coords.resize(begin);
      return Invalid(absl::StrCat(what(), " has ", count,
                                  " numbers, an odd count; a polygon is a flat list "
                                  "[x1, y1, x2, y2, ...]"));
    }
    if (count < 6) {
      p->coords.resize(begin);
      return Invalid(absl::StrCat(what(), " has ", count / 2,
                                  " point(s); a polygon needs at least 3 points (6 numbers)"));
    }
    if (!element_status.ok()) {
      p->coords.resize(begin);
      return element_status;
    }
    p->polygon_ends.push_back(p->coords.size());
    return absl::OkStatus();
  }

  absl::Status ReadRleSize(od::value value, Pending* p) {
    const char* start = Start(value);
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(value, &type));
    auto shape_error = [&] {
      return Invalid(absl::StrCat("RLE \"size\" is ", Excerpt(start), ", not [height, width]"));
    };
    if (type != od::json_type::array) {
      p->size_status = shape_error();
      return absl::OkStatus();
    }
    od::array array;
    if (auto error = value.get_array().get(array)) return Fail(error);
    size_t count = 0;
    absl::Status element_status;
    for (auto element_result : array) {
      od::value element;
      if (auto error = element_result.get(element)) return Fail(error);
      if (count < 2 && element_status.ok()) {
        element_status = Integer(element, count == 0 ? "RLE height" : "RLE width",
                                 count == 0 ? &p->rle_height : &p->rle_width);
        if (IsSyntax(element_status)) return element_status;
      }
      ++count;
    }
    p->size_status = count != 2 ? shape_error() : element_status;
    return absl::OkStatus();
  }

  absl::Status ReadRleCounts(od::value value, Pending* p) {
    const char* start = Start(value);
    od::json_type type{};
    VISION_RETURN_IF_ERROR(Type(value, &type));
    if (type == od::json_type::string) {
      p->counts_is_string = true;
      if (auto error = value.get_string().get(p->counts_string)) return Fail(error);
      return absl::OkStatus();
    }
    if (type != od::json_type::array) {
      p->counts_status = Invalid(absl::StrCat("RLE \"counts\" is ", Excerpt(start),
                                              "; expected a list of runs or a compressed string"));
      return absl::OkStatus();
    }
    od::array array;
    if (auto error = value.get_array().get(array)) return Fail(error);
    size_t i = 0;
    for (auto element_result : array) {
      od::value element;
      if (auto error = element_result.get(element)) return Fail(error);
      int64_t run = 0;
      if (p->counts_status.ok() && element.get_int64().get(run) != simdjson::SUCCESS) {
        p->counts_status = Integer(element, absl::StrCat("RLE counts[", i, "]"), &run);
        if (IsSyntax(p->counts_status)) return p->counts_status;
      }
      if (p->counts_status.ok()) {
        if (run < 0 || run > std::numeric_limits<uint32_t>::max()) {
          p->counts_status =
              Invalid(absl::StrCat("RLE counts[", i, "] is ", run, ", not a pixel count"));
        } else {
          p->runs.push_back(static_cast<uint32_t>(run));
        }
      }
      ++i;
    }
    return absl::OkStatus();
  }

  // Checks a point against the image (kMaxOutsideFraction) and clamps it to [0, w] x [0, h].
  template <typename What>
  static absl::Status ClampPoint(double* x, double* y, int width, int height, What what) {
    const double slack_x = kMaxOutsideFraction * width;
    const double slack_y = kMaxOutsideFraction * height;
    if (*x < -slack_x || *x > width + slack_x || *y < -slack_y || *y > height + slack_y) {
      return Invalid(absl::StrCat(
          what(), " (", *x, ", ", *y, ") lies far outside the ", width, "x", height,
          " image (more than ", 100 * kMaxOutsideFraction,
          "% of its size beyond the border); does the annotation belong to another image?"));
    }
    *x = std::clamp(*x, 0.0, static_cast<double>(width));
    *y = std::clamp(*y, 0.0, static_cast<double>(height));
    return absl::OkStatus();
  }

  // The former ParseAnnotation's checks, in its order, on what ReadAnnotation kept; appends
  // the mask to the arrays.
  absl::Status CheckAnnotation(Pending* p, CocoAnnotationRecord* record, uint32_t* image_index,
                               bool* image_known) {
    if (!p->has_image_id) return Invalid("missing \"image_id\"");
    VISION_RETURN_IF_ERROR(p->image_id_status);
    auto found = std::lower_bound(image_ids_.begin(), image_ids_.end(), p->image_id);
    if (found == image_ids_.end() || *found != p->image_id) {
      return Invalid(absl::StrCat("image_id ", p->image_id, " is not in \"images\""));
    }
    *image_index = static_cast<uint32_t>(found - image_ids_.begin());
    *image_known = true;
    if (!p->has_category_id) return Invalid("missing \"category_id\"");
    VISION_RETURN_IF_ERROR(p->category_status);
    const std::vector<CocoCategoryRecord>& categories = arrays_.categories;
    auto category =
        std::lower_bound(categories.begin(), categories.end(), p->category_id,
                         [](const CocoCategoryRecord& c, int64_t id) { return c.id < id; });
    if (category == categories.end() || category->id != p->category_id) {
      return Invalid(absl::StrCat("category_id ", p->category_id, " is not in \"categories\""));
    }
    record->label = static_cast<int32_t>(category - categories.begin());
    VISION_RETURN_IF_ERROR(p->crowd_status);
    record->is_crowd = p->is_crowd ? 1 : 0;

    const CocoImageRecord& image = arrays_.images[*image_index];
    const int width = image.width;
    const int height = image.height;
    if (!p->has_bbox) return Invalid("missing \"bbox\"");
    VISION_RETURN_IF_ERROR(p->bbox_status);
    const double* v = p->bbox;
    if (v[2] < 0 || v[3] < 0) {
      return Invalid(absl::StrCat("bbox ", Excerpt(p->bbox_start), " has a negative ",
                                  v[2] < 0 ? "width" : "height",
                                  "; COCO boxes are [x, y, width, height], not corners"));
    }
    // Checked against the image here, clamped only for training (Object()).
    double x1 = v[0];
    double y1 = v[1];
    double x2 = v[0] + v[2];
    double y2 = v[1] + v[3];
    VISION_RETURN_IF_ERROR(ClampPoint(&x1, &y1, width, height, [] { return "bbox corner"; }));
    VISION_RETURN_IF_ERROR(ClampPoint(&x2, &y2, width, height, [] { return "bbox corner"; }));
    std::copy(v, v + 4, record->box);
    VISION_RETURN_IF_ERROR(p->area_status);
    if (p->has_area && !(p->area >= 0)) {
      return Invalid(absl::StrCat("\"area\" is ", p->area, "; an area is >= 0"));
    }
    record->area = p->has_area ? p->area : -1;

    record->mask = kNoMask;
    if (!p->has_segmentation) return absl::OkStatus();
    if (p->mask == kPolygonMask) {
      // Polygons read whole are checked in order before the problem of the next is reported;
      // they are kept unclamped (Object() clamps for training).
      size_t begin = 0;
      for (size_t polygon = 0; polygon < p->polygon_ends.size(); ++polygon) {
        auto what = [polygon] { return absl::StrCat("segmentation polygon ", polygon, " point"); };
        for (size_t k = begin; k < p->polygon_ends[polygon]; k += 2) {
          double x = p->coords[k];
          double y = p->coords[k + 1];
          VISION_RETURN_IF_ERROR(ClampPoint(&x, &y, width, height, what));
        }
        begin = p->polygon_ends[polygon];
      }
      VISION_RETURN_IF_ERROR(p->segmentation_status);
      record->mask = kPolygonMask;
      record->mask_begin = arrays_.polygon_offsets.size() - 1;
      begin = 0;
      for (size_t end : p->polygon_ends) {
        arrays_.coords.insert(arrays_.coords.end(), p->coords.begin() + begin,
                              p->coords.begin() + end);
        arrays_.polygon_offsets.push_back(arrays_.coords.size());
        begin = end;
      }
      record->mask_end = arrays_.polygon_offsets.size() - 1;
      return absl::OkStatus();
    }
    if (p->mask == kRleMask) {
      if (!p->has_size) return Invalid("missing \"size\"");
      if (!p->has_counts) return Invalid("missing \"counts\"");
      VISION_RETURN_IF_ERROR(p->size_status);
      if (p->rle_height != height || p->rle_width != width) {
        return Invalid(absl::StrCat("RLE size [", p->rle_height, ", ", p->rle_width,
                                    "] does not match the image's [height, width] [", height, ", ",
                                    width, "]"));
      }
      if (p->counts_is_string) {
        VISION_ASSIGN_OR_RETURN(p->runs, core::DecodeCocoRleString(absl::string_view(
                                             p->counts_string.data(), p->counts_string.size())));
      } else {
        VISION_RETURN_IF_ERROR(p->counts_status);
      }
      int64_t total = 0;
      for (uint32_t run : p->runs) total += run;
      if (total != static_cast<int64_t>(height) * width) {
        return Invalid(absl::StrCat("RLE counts add up to ", total, " pixels but the ", width, "x",
                                    height, " mask has ", static_cast<int64_t>(height) * width));
      }
      record->mask = kRleMask;
      record->mask_begin = arrays_.rle_counts.size();
      arrays_.rle_counts.insert(arrays_.rle_counts.end(), p->runs.begin(), p->runs.end());
      record->mask_end = arrays_.rle_counts.size();
      return absl::OkStatus();
    }
    return p->segmentation_status;
  }

  const std::string& json_path_;
  const int fd_;
  const uint64_t size_;
  const uint64_t window_bytes_;
  std::vector<RootField> fields_;  // from Scan()
  od::parser parser_;
  std::unique_ptr<char[]> window_;  // the window being parsed, padded for simdjson
  size_t window_capacity_ = 0;
  const char* window_end_ = nullptr;
  absl::Status io_error_;
  absl::Status nesting_error_;
  simdjson::error_code syntax_error_ = simdjson::SUCCESS;
  CocoIndexArrays arrays_;
  std::vector<int64_t> image_ids_;  // of arrays_.images, sorted
};

// ---------------------------------------------------------------------------------------------
// Cache file.

constexpr char kMagic[8] = {'V', 'C', 'O', 'C', 'O', 'I', 'D', 'X'};
enum Section {
  kCategories,
  kImages,
  kAnnotations,
  kPolygonOffsets,
  kCoords,
  kRleCounts,
  kNames,
  kNumSections
};

struct CacheHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t num_sections;
  uint32_t has_annotations;  // since format version 2
  uint32_t reserved;
  uint64_t file_size;
  uint64_t source_size;
  int64_t source_mtime_ns;
  uint64_t source_hash;
  // CocoCacheChecksum() of the whole file, this field read as 0; since format version 3.
  uint64_t checksum;
  uint64_t offset[kNumSections];
  uint64_t bytes[kNumSections];
};
static_assert(sizeof(CacheHeader) % 8 == 0 && offsetof(CacheHeader, checksum) % 8 == 0);

uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

struct SectionData {
  const void* data;
  uint64_t bytes;
};

template <typename T>
SectionData SectionOf(const std::vector<T>& v) {
  return {v.data(), v.size() * sizeof(T)};
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

bool WriteAll(int fd, const void* data, uint64_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<uint64_t>(size, 1 << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<uint64_t>(n);
  }
  return true;
}

// Why a mapped cache cannot be used, or OK.
absl::Status CheckRange(absl::string_view what, uint64_t begin, uint64_t end, uint64_t limit) {
  if (begin > end || end > limit) {
    return absl::DataLossError(
        absl::StrCat(what, " range [", begin, ", ", end, ") is outside the ", limit, " stored"));
  }
  return absl::OkStatus();
}

// CocoCacheChecksum of the `size` bytes of the file `fd`, read through a small buffer rather
// than through the mapping, so that checking the cache does not map all of it into the
// process (the coordinates are touched only as samples are loaded); as fast on this machine.
absl::StatusOr<uint64_t> ChecksumOfFile(int fd, uint64_t size) {
  constexpr uint64_t at = offsetof(CacheHeader, checksum);
  const size_t capacity = ReadBufferBytes(1 << 20, size);
  const std::unique_ptr<char[]> buffer(new char[capacity]);
  WideHasher hasher;
  for (uint64_t done = 0; done < size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(capacity, size - done));
    size_t filled = 0;
    while (filled < want) {
      const ssize_t n = ::pread(fd, buffer.get() + filled, want - filled, done + filled);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::DataLossError(absl::StrCat("read error at byte ", done + filled, ": ",
                                                n == 0 ? "unexpected end" : ErrnoText()));
      }
      filled += static_cast<size_t>(n);
    }
    if (done <= at && at + 8 <= done + want) std::memset(buffer.get() + (at - done), 0, 8);
    hasher.Update(buffer.get(), want);
    done += want;
  }
  return hasher.Finish();
}

}  // namespace

// ---------------------------------------------------------------------------------------------

absl::Status CocoNestingError(const std::string& json_path, uint64_t offset) {
  return absl::InvalidArgumentError(absl::StrCat(
      json_path, ": byte ", offset, ": lists and objects nest more than ", core::kMaxNestingDepth,
      " deep; a COCO instances file nests at most 5 deep (root, \"annotations\", an annotation, "
      "\"segmentation\", a polygon), so the file is damaged or not a COCO file (refused before "
      "parsing: nesting this deep would exhaust the parser's stack)"));
}

core::ObjectInstance CocoIndex::ObjectWithoutGeometry(const CocoAnnotationRecord& annotation,
                                                      const CocoImageRecord& image) const {
  core::ObjectInstance object;
  object.label = annotation.label;
  object.is_crowd = annotation.is_crowd != 0;
  object.annotation_id = annotation.id;
  if (annotation.mask == kRleMask) {
    object.rle.height = image.height;
    object.rle.width = image.width;
    object.rle.counts.assign(rle_counts_.begin() + annotation.mask_begin,
                             rle_counts_.begin() + annotation.mask_end);
  }
  return object;
}

core::ObjectInstance CocoIndex::Object(const CocoAnnotationRecord& annotation,
                                       const CocoImageRecord& image) const {
  const double width = image.width;
  const double height = image.height;
  core::ObjectInstance object = ObjectWithoutGeometry(annotation, image);
  const double* b = annotation.box;
  const double x1 = std::clamp(b[0], 0.0, width);
  const double y1 = std::clamp(b[1], 0.0, height);
  const double x2 = std::clamp(b[0] + b[2], 0.0, width);
  const double y2 = std::clamp(b[1] + b[3], 0.0, height);
  object.box = cv::Rect2f(static_cast<float>(x1), static_cast<float>(y1),
                          static_cast<float>(x2 - x1), static_cast<float>(y2 - y1));
  if (annotation.mask == kPolygonMask) {
    object.polygons.reserve(annotation.mask_end - annotation.mask_begin);
    for (uint64_t p = annotation.mask_begin; p < annotation.mask_end; ++p) {
      core::Polygon polygon;
      polygon.reserve((polygon_offsets_[p + 1] - polygon_offsets_[p]) / 2);
      for (uint64_t k = polygon_offsets_[p]; k < polygon_offsets_[p + 1]; k += 2) {
        polygon.emplace_back(static_cast<float>(std::clamp(coords_[k], 0.0, width)),
                             static_cast<float>(std::clamp(coords_[k + 1], 0.0, height)));
      }
      object.polygons.push_back(std::move(polygon));
    }
  }
  return object;
}

core::ObjectInstance CocoIndex::GroundTruthObject(const CocoAnnotationRecord& annotation,
                                                  const CocoImageRecord& image) const {
  core::ObjectInstance object = ObjectWithoutGeometry(annotation, image);
  const double* b = annotation.box;
  object.box = cv::Rect2f(static_cast<float>(b[0]), static_cast<float>(b[1]),
                          static_cast<float>(b[2]), static_cast<float>(b[3]));
  object.area = annotation.area;
  if (annotation.mask == kPolygonMask) {
    // annToRLE: frPyObjects per polygon, merged (core::RleFromPolygons, from the doubles).
    std::vector<double> xy;
    for (uint64_t p = annotation.mask_begin; p < annotation.mask_end; ++p) {
      xy.assign(coords_.begin() + polygon_offsets_[p], coords_.begin() + polygon_offsets_[p + 1]);
      object.rle = core::RleUnion(object.rle,
                                  core::RleFromPolygonCoordinates(xy, image.height, image.width));
    }
    if (object.rle.counts.empty()) {
      object.rle = core::RleFromPolygonCoordinates({}, image.height, image.width);
    }
  }
  return object;
}

CocoIndex CocoIndex::FromArrays(CocoIndexArrays arrays) {
  auto owned = std::make_shared<CocoIndexArrays>(std::move(arrays));
  CocoIndex index;
  index.categories_ = owned->categories;
  index.images_ = owned->images;
  index.annotations_ = owned->annotations;
  index.polygon_offsets_ = owned->polygon_offsets;
  index.coords_ = owned->coords;
  index.rle_counts_ = owned->rle_counts;
  index.names_ = owned->names;
  index.has_annotations_ = owned->has_annotations;
  index.storage_ = std::move(owned);
  return index;
}

absl::StatusOr<CocoIndex> CocoIndex::MapCache(const std::string& cache_path,
                                              const CocoSourceKey& expected_key) {
  Fd fd(::open(cache_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError("no cache yet");
    return absl::PermissionDeniedError(absl::StrCat("cannot open it: ", ErrnoText()));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::DataLossError(absl::StrCat("cannot stat it: ", ErrnoText()));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  CacheHeader header;
  if (file_size < sizeof(header) ||
      ::pread(fd.get(), &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return absl::DataLossError(absl::StrCat("truncated: ", file_size, " bytes, less than its ",
                                            sizeof(header), "-byte header"));
  }
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not a COCO index cache (wrong magic bytes)");
  }
  if (header.format_version != kCocoIndexFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("written by format version ",
                                                      header.format_version, "; this reader's is ",
                                                      kCocoIndexFormatVersion));
  }
  if (header.file_size != file_size || file_size % 8 != 0) {
    return absl::DataLossError(absl::StrCat("truncated or overwritten: ", file_size,
                                            " bytes, its header says ", header.file_size));
  }
  // Every byte, before anything in it is believed (the key included, so that a damaged key
  // reads as damage, not as a stale cache).
  VISION_ASSIGN_OR_RETURN(const uint64_t checksum, ChecksumOfFile(fd.get(), file_size));
  if (checksum != header.checksum) {
    return absl::DataLossError(absl::StrCat("corrupt: its checksum is ", absl::Hex(checksum),
                                            ", its header says ", absl::Hex(header.checksum)));
  }
  if (header.source_size != expected_key.size || header.source_mtime_ns != expected_key.mtime_ns ||
      header.source_hash != expected_key.content_hash) {
    return absl::FailedPreconditionError(
        absl::StrCat("stale: built from a source of ", header.source_size, " bytes modified at ",
                     header.source_mtime_ns, " ns (hash ", absl::Hex(header.source_hash),
                     "), the file now has ", expected_key.size, " bytes, ", expected_key.mtime_ns,
                     " ns (hash ", absl::Hex(expected_key.content_hash), ")"));
  }
  void* address = ::mmap(nullptr, file_size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (address == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map it: ", ErrnoText()));
  }
  CocoIndex index;
  index.storage_ = std::shared_ptr<const void>(
      address, [file_size](const void* p) { ::munmap(const_cast<void*>(p), file_size); });
  const char* base = static_cast<const char*>(address);
  const size_t element_size[kNumSections] = {sizeof(CocoCategoryRecord),
                                             sizeof(CocoImageRecord),
                                             sizeof(CocoAnnotationRecord),
                                             sizeof(uint64_t),
                                             sizeof(float),
                                             sizeof(uint32_t),
                                             1};
  for (int s = 0; s < kNumSections; ++s) {
    if (header.offset[s] % 8 != 0 || header.bytes[s] % element_size[s] != 0 ||
        header.offset[s] > file_size || header.bytes[s] > file_size - header.offset[s]) {
      return absl::DataLossError(absl::StrCat("corrupt: section ", s, " at ", header.offset[s],
                                              " (", header.bytes[s], " bytes) does not fit"));
    }
  }
  auto span_of = [&](auto* type_tag, int s) {
    using T = std::remove_pointer_t<decltype(type_tag)>;
    return absl::Span<const T>(reinterpret_cast<const T*>(base + header.offset[s]),
                               header.bytes[s] / sizeof(T));
  };
  index.categories_ = span_of(static_cast<CocoCategoryRecord*>(nullptr), kCategories);
  index.images_ = span_of(static_cast<CocoImageRecord*>(nullptr), kImages);
  index.annotations_ = span_of(static_cast<CocoAnnotationRecord*>(nullptr), kAnnotations);
  index.polygon_offsets_ = span_of(static_cast<uint64_t*>(nullptr), kPolygonOffsets);
  index.coords_ = span_of(static_cast<double*>(nullptr), kCoords);
  index.rle_counts_ = span_of(static_cast<uint32_t*>(nullptr), kRleCounts);
  index.names_ = absl::string_view(base + header.offset[kNames], header.bytes[kNames]);
  index.has_annotations_ = header.has_annotations != 0;

  // Bounds of every index into another section, so that a file with a valid checksum but
  // wrong contents (a writer's bug) cannot make Load() read outside the mapping. (Values
  // inside the sections, coordinates say, are covered by the checksum alone.)
  if (index.polygon_offsets_.empty() || index.polygon_offsets_.front() != 0) {
    return absl::DataLossError("corrupt: polygon offsets do not start at 0");
  }
  for (size_t p = 1; p < index.polygon_offsets_.size(); ++p) {
    VISION_RETURN_IF_ERROR(CheckRange("corrupt: polygon coordinate", index.polygon_offsets_[p - 1],
                                      index.polygon_offsets_[p], index.coords_.size()));
  }
  for (const CocoCategoryRecord& c : index.categories_) {
    VISION_RETURN_IF_ERROR(CheckRange("corrupt: category name", c.name_begin,
                                      c.name_begin + c.name_size, index.names_.size()));
  }
  for (const CocoImageRecord& image : index.images_) {
    VISION_RETURN_IF_ERROR(CheckRange("corrupt: file name", image.name_begin,
                                      image.name_begin + image.name_size, index.names_.size()));
    VISION_RETURN_IF_ERROR(CheckRange("corrupt: annotation", image.first_annotation,
                                      image.first_annotation + image.num_annotations,
                                      index.annotations_.size()));
  }
  const uint64_t num_polygons = index.polygon_offsets_.size() - 1;
  for (const CocoAnnotationRecord& a : index.annotations_) {
    if (a.label < 0 || static_cast<size_t>(a.label) >= index.categories_.size() || a.mask > 2) {
      return absl::DataLossError(absl::StrCat("corrupt: annotation ", a.id, " has label ", a.label,
                                              " and mask kind ", int{a.mask}));
    }
    if (a.mask == kPolygonMask) {
      VISION_RETURN_IF_ERROR(
          CheckRange("corrupt: polygon", a.mask_begin, a.mask_end, num_polygons));
    } else if (a.mask == kRleMask) {
      VISION_RETURN_IF_ERROR(
          CheckRange("corrupt: RLE run", a.mask_begin, a.mask_end, index.rle_counts_.size()));
    }
  }
  index.cache_path_ = cache_path;
  return index;
}

uint64_t CocoCacheChecksum(const char* file, uint64_t size) {
  static const char kZeros[8] = {};
  constexpr uint64_t at = offsetof(CacheHeader, checksum);
  WideHasher hasher;
  if (size < at + 8) {
    hasher.Update(file, size);
  } else {
    hasher.Update(file, at);
    hasher.Update(kZeros, 8);
    hasher.Update(file + at + 8, size - at - 8);
  }
  return hasher.Finish();
}

absl::StatusOr<CocoSourceKey> ReadSourceKey(const std::string& json_path) {
  VISION_ASSIGN_OR_RETURN(CocoSourceKey key, StatKey(json_path));
  Fd fd(::open(json_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::NotFoundError(absl::StrCat(json_path, ": cannot open the file: ", ErrnoText()));
  }
  const size_t capacity = ReadBufferBytes(4 << 20, key.size);
  const std::unique_ptr<char[]> buffer(new char[capacity]);
  WideHasher hasher;
  for (;;) {
    // Whole buffers (a multiple of 8 bytes) until the end, as the hash requires.
    size_t filled = 0;
    while (filled < capacity) {
      const ssize_t n = ::read(fd.get(), buffer.get() + filled, capacity - filled);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::DataLossError(absl::StrCat(json_path, ": read error: ", ErrnoText()));
      if (n == 0) break;
      filled += static_cast<size_t>(n);
    }
    hasher.Update(buffer.get(), filled);
    if (filled < capacity) break;
  }
  key.content_hash = hasher.Finish();
  return key;
}

absl::StatusOr<CocoIndexArrays> ParseCocoJson(const std::string& json_path, CocoSourceKey* key,
                                              uint64_t window_bytes) {
  VISION_ASSIGN_OR_RETURN(const CocoSourceKey stat_key, StatKey(json_path));
  Fd fd(::open(json_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::NotFoundError(absl::StrCat(json_path, ": cannot open the file: ", ErrnoText()));
  }
  uint64_t hash = 0;
  VISION_ASSIGN_OR_RETURN(CocoIndexArrays arrays,
                          JsonParser(json_path, fd.get(), stat_key.size, window_bytes)
                              .Parse(key != nullptr ? &hash : nullptr));
  // The windows were read again after the scan (and its hash): the file must not have changed.
  VISION_ASSIGN_OR_RETURN(const CocoSourceKey after, StatKey(json_path));
  if (after.size != stat_key.size || after.mtime_ns != stat_key.mtime_ns) {
    return absl::AbortedError(
        absl::StrCat(json_path, ": the file changed while being read; load it again"));
  }
  if (key != nullptr) {
    *key = stat_key;
    key->content_hash = hash;
  }
  return arrays;
}

absl::Status WriteCocoCache(const CocoIndexArrays& arrays, const CocoSourceKey& key,
                            const std::string& cache_path) {
  const SectionData sections[kNumSections] = {SectionOf(arrays.categories),
                                              SectionOf(arrays.images),
                                              SectionOf(arrays.annotations),
                                              SectionOf(arrays.polygon_offsets),
                                              SectionOf(arrays.coords),
                                              SectionOf(arrays.rle_counts),
                                              {arrays.names.data(), arrays.names.size()}};
  CacheHeader header;
  std::memset(&header, 0, sizeof(header));
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.format_version = kCocoIndexFormatVersion;
  header.num_sections = kNumSections;
  header.has_annotations = arrays.has_annotations ? 1 : 0;
  header.source_size = key.size;
  header.source_mtime_ns = key.mtime_ns;
  header.source_hash = key.content_hash;
  uint64_t offset = Align8(sizeof(header));
  for (int s = 0; s < kNumSections; ++s) {
    header.offset[s] = offset;
    header.bytes[s] = sections[s].bytes;
    offset = Align8(offset + sections[s].bytes);
  }
  header.file_size = offset;

  const std::string temporary = absl::StrCat(cache_path, ".tmp.", ::getpid());
  Fd fd(::open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(temporary, ": cannot create the cache file: ", ErrnoText()));
  }
  auto fail = [&temporary](absl::string_view what) {
    const std::string reason = ErrnoText();
    ::unlink(temporary.c_str());
    return absl::DataLossError(absl::StrCat(temporary, ": ", what, ": ", reason));
  };
  static const char kZeros[8] = {};
  uint64_t written = 0;
  // The checksum of the file's bytes as they are written (the header's checksum field still
  // 0), in whole 8-byte words as CocoCacheChecksum reads them: each piece's last partial word
  // is hashed together with its zero padding.
  WideHasher hasher;
  auto write_padded = [&](const void* data, uint64_t bytes) {
    if (!WriteAll(fd.get(), data, bytes)) return false;
    written += bytes;
    const uint64_t pad = Align8(written) - written;
    if (pad > 0 && !WriteAll(fd.get(), kZeros, pad)) return false;
    written += pad;
    const uint64_t whole = bytes / 8 * 8;
    hasher.Update(static_cast<const char*>(data), whole);
    if (whole < bytes) {
      char last[8] = {};
      std::memcpy(last, static_cast<const char*>(data) + whole, bytes - whole);
      hasher.Update(last, 8);
    }
    return true;
  };
  if (!write_padded(&header, sizeof(header))) return fail("write failed (disk full?)");
  for (const SectionData& section : sections) {
    if (!write_padded(section.data, section.bytes)) return fail("write failed (disk full?)");
  }
  if (written != header.file_size) {
    errno = EIO;
    return fail(absl::StrCat("wrote ", written, " bytes, expected ", header.file_size));
  }
  header.checksum = hasher.Finish();
  if (::pwrite(fd.get(), &header.checksum, sizeof(header.checksum),
               offsetof(CacheHeader, checksum)) != static_cast<ssize_t>(sizeof(header.checksum))) {
    return fail("write failed (disk full?)");
  }
  if (::fsync(fd.get()) != 0) return fail("fsync failed");
  if (::rename(temporary.c_str(), cache_path.c_str()) != 0) return fail("rename failed");
  // The rename itself must reach the disk before anyone relies on it.
  const std::string dir = fs::path(cache_path).parent_path().string();
  Fd dir_fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
  return absl::OkStatus();
}

std::string DefaultCocoCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] != '\0') {
    return (fs::path(xdg) / "vision-train" / "coco").string();
  }
  const char* home = std::getenv("HOME");
  return (fs::path(home != nullptr && home[0] != '\0' ? home : "/tmp") / ".cache" / "vision-train" /
          "coco")
      .string();
}

std::string CocoCachePath(const std::string& json_path, const std::string& cache_dir) {
  if (cache_dir.empty()) return absl::StrCat(json_path, ".index");
  std::error_code error;
  const std::string absolute = fs::absolute(json_path, error).lexically_normal().string();
  Hasher hasher;
  hasher.Update(absolute.data(), absolute.size());
  return (fs::path(cache_dir) /
          absl::StrFormat("%s-%016x.index", fs::path(json_path).stem().string(), hasher.Finish()))
      .string();
}

namespace {

// Whether the cache can be written in `dir`; else why not. A directory is created when
// missing. access() says EROFS on a read-only file system even to root (the tests check it);
// what it cannot know (a server that refuses root, say) shows when the lock file cannot be
// created, which also moves on to the next directory.
absl::Status UsableDirectory(const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir, error)) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir, " is not a directory and cannot be created",
                     error ? absl::StrCat(" (", error.message(), ")") : ""));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(dir, " is not writable (", ErrnoText(), ")"));
  }
  return absl::OkStatus();
}

// Holds an flock() on `path` while alive.
class FileLock {
 public:
  static absl::StatusOr<std::unique_ptr<FileLock>> Acquire(const std::string& path,
                                                           const std::string& cache_path,
                                                           double wait_seconds) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, ": cannot create the lock file: ", ErrnoText()));
    }
    std::unique_ptr<FileLock> lock(new FileLock(fd));
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(std::max(0.0, wait_seconds));
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        return absl::PermissionDeniedError(absl::StrCat(path, ": flock failed: ", ErrnoText()));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "COCO: waited ", wait_seconds, " s for another process to build the index cache ",
            cache_path, " (it holds the lock ", path,
            "); raise CocoOptions.cache_wait_seconds if the build is just slow, or find the "
            "process holding the lock (fuser ",
            path, ")"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return lock;
  }
  ~FileLock() { ::close(fd_); }  // closing releases the flock

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

void Notice(const std::string& message) { std::cerr << "COCO: " << message << "\n"; }

}  // namespace

absl::StatusOr<CocoIndex> OpenCocoIndex(const std::string& json_path,
                                        const CocoCacheOptions& options) {
  auto in_memory = [&json_path](absl::string_view why) -> absl::StatusOr<CocoIndex> {
    VISION_ASSIGN_OR_RETURN(CocoIndexArrays arrays, ParseCocoJson(json_path));
    CocoIndex index = CocoIndex::FromArrays(std::move(arrays));
    index.report_ = absl::StrCat("parsed into memory (", why, ")");
    return index;
  };
  if (!options.enabled) return in_memory("cache: OFF");
  VISION_ASSIGN_OR_RETURN(const CocoSourceKey stat_key, StatKey(json_path));
  if (static_cast<int64_t>(stat_key.size) < options.min_source_bytes) {
    return in_memory(absl::StrCat("smaller than cache_min_bytes ", options.min_source_bytes));
  }

  std::vector<std::string> dirs;
  if (!options.cache_dir.empty()) {
    dirs.push_back(options.cache_dir);
  } else {
    const std::string parent = fs::path(json_path).parent_path().string();
    dirs.push_back(parent.empty() ? "." : parent);
    dirs.push_back(DefaultCocoCacheDir());
  }
  std::vector<std::string> refused;
  std::optional<CocoSourceKey> key;
  for (size_t d = 0; d < dirs.size(); ++d) {
    const std::string cache_path =
        CocoCachePath(json_path, options.cache_dir.empty() && d == 0 ? "" : dirs[d]);
    const std::string fallback =
        refused.empty() ? "" : absl::StrCat("; instead of ", absl::StrJoin(refused, "; "));
    // A valid cache needs no lock (it only ever appears whole, by a rename), nor a writable
    // directory.
    if (!key.has_value()) {
      VISION_ASSIGN_OR_RETURN(key, ReadSourceKey(json_path));
    }
    absl::StatusOr<CocoIndex> mapped = CocoIndex::MapCache(cache_path, *key);
    if (mapped.ok()) {
      mapped->report_ = absl::StrCat("mapped ", cache_path, fallback);
      return mapped;
    }
    if (absl::Status usable = UsableDirectory(dirs[d]); !usable.ok()) {
      // Said when a cache is there but stale or damaged (not when it cannot be opened).
      const bool there =
          absl::IsDataLoss(mapped.status()) || absl::IsFailedPrecondition(mapped.status());
      refused.push_back(!there ? std::string(usable.message())
                               : absl::StrCat(usable.message(), ", and its cache ", cache_path,
                                              " cannot be used (", mapped.status().message(), ")"));
      continue;
    }
    absl::StatusOr<std::unique_ptr<FileLock>> lock =
        FileLock::Acquire(absl::StrCat(cache_path, ".lock"), cache_path, options.wait_seconds);
    if (absl::IsDeadlineExceeded(lock.status())) return lock.status();
    if (!lock.ok()) {
      refused.push_back(std::string(lock.status().message()));
      continue;
    }
    // Another process may have built it while this one waited.
    mapped = CocoIndex::MapCache(cache_path, *key);
    if (mapped.ok()) {
      mapped->report_ =
          absl::StrCat("mapped ", cache_path, " (built by another process)", fallback);
      return mapped;
    }
    const std::string why = absl::IsNotFound(mapped.status())
                                ? "first load"
                                : absl::StrCat("rebuilt: ", mapped.status().message());
    if (!absl::IsNotFound(mapped.status())) {
      Notice(absl::StrCat("the index cache ", cache_path, " is ",
                          absl::IsDataLoss(mapped.status()) ? "damaged" : "out of date", " (",
                          mapped.status().message(), "); rebuilding it from ", json_path));
    }
    CocoSourceKey parsed_key;
    VISION_ASSIGN_OR_RETURN(CocoIndexArrays arrays, ParseCocoJson(json_path, &parsed_key));
    if (absl::Status written = WriteCocoCache(arrays, parsed_key, cache_path); !written.ok()) {
      Notice(absl::StrCat("cannot write the index cache (", written.message(),
                          "); keeping the index in memory"));
      CocoIndex index = CocoIndex::FromArrays(std::move(arrays));
      index.report_ = absl::StrCat("parsed into memory (", written.message(), ")");
      return index;
    }
    arrays = CocoIndexArrays();  // frees the arrays before mapping the file
    VISION_ASSIGN_OR_RETURN(CocoIndex index,
                            core::WithContext(absl::StrCat(cache_path, ": just written"),
                                              CocoIndex::MapCache(cache_path, parsed_key)));
    index.report_ = absl::StrCat("built ", cache_path, " (", why, ")", fallback);
    return index;
  }
  const std::string why =
      absl::StrCat("no writable cache directory: ", absl::StrJoin(refused, "; "));
  Notice(absl::StrCat(
      json_path, ": ", why,
      "; parsing it into memory on every load instead. To cache it, set "
      "CocoOptions.cache_dir to a writable directory (or CocoOptions.cache: OFF to parse "
      "without this notice)"));
  return in_memory(why);
}

}  // namespace vision::data::datasets::coco
