#include "models/backbones/torchvision_import.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "core/status_util.h"

namespace vision::models::backbones {
namespace {

// A value of the pickle machine. Containers are shared and mutable because the pickle memo
// refers to a dict before SETITEMS fills it.
struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor
  };

  explicit Value(Kind k) : kind(k) {}

  Kind kind;
  int64_t integer = 0;                                 // kBool, kInt
  double number = 0;                                   // kFloat
  std::string text;                                    // kString; "module.name" for kGlobal
  std::vector<ValuePtr> items;                         // kTuple, kList
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // kDict, in insertion order
  // kStorage: the archive record data/<record> holding `numel` elements of `dtype`.
  std::string record;
  at::ScalarType dtype = at::kFloat;
  int64_t numel = 0;
  // kTensor: a strided view of `storage`.
  ValuePtr storage;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

const char* KindName(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kGlobal:
      return "class or function";
    case Value::Kind::kStorage:
      return "storage";
    case Value::Kind::kTensor:
      return "tensor";
  }
  return "?";
}

ValuePtr MakeValue(Value::Kind kind) { return std::make_shared<Value>(kind); }

// torch.save names a storage's element type by its legacy class, e.g. torch.FloatStorage.
bool StorageDtype(const std::string& global, at::ScalarType* dtype) {
  static const auto* const kTypes = new std::map<std::string, at::ScalarType>{
      {"torch.FloatStorage", at::kFloat},  {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},    {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},    {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},  {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},    {"torch.BoolStorage", at::kBool},
      {"torch.UntypedStorage", at::kByte},
  };
  auto it = kTypes->find(global);
  if (it == kTypes->end()) return false;
  *dtype = it->second;
  return true;
}

// Interprets a pickle stream as torch.save writes it. Persistent ids refer to storages in the
// archive; they are only recorded here and read when a tensor is materialised.
class Unpickler {
 public:
  Unpickler(absl::string_view data, std::string where) : data_(data), where_(std::move(where)) {}

  // Values can form cycles (a list appended to itself through the memo) and chains of any
  // depth; freeing them through their shared pointers would leak the cycles and recurse once
  // per level. Every value is owned by all_ as well, so dropping the links first frees each
  // value on its own. Values returned by Run() stay valid until the Unpickler is destroyed.
  ~Unpickler() {
    for (const ValuePtr& value : all_) {
      value->items.clear();
      value->entries.clear();
      value->storage.reset();
    }
  }

  absl::StatusOr<ValuePtr> Run() {
    while (true) {
      if (pos_ >= data_.size()) return Error("the pickle ends without STOP");
      const size_t op_pos = pos_;
      const uint8_t op = static_cast<uint8_t>(data_[pos_++]);
      if (op == '.') {  // STOP
        if (stack_.size() != 1) return Error("STOP with a malformed stack");
        return stack_.back();
      }
      // The context is built only on failure: this loop runs once per opcode.
      if (absl::Status status = Step(op); !status.ok()) {
        return core::WithContext(
            absl::StrCat(where_, " at byte ", op_pos, " (opcode 0x", absl::Hex(op), ")"), status);
      }
    }
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", what));
  }

  absl::Status Need(size_t bytes) const {
    if (data_.size() - pos_ < bytes) return absl::InvalidArgumentError("truncated pickle");
    return absl::OkStatus();
  }

  // Little-endian unsigned integer of `bytes` bytes.
  uint64_t ReadUnsigned(size_t bytes) {
    uint64_t value = 0;
    for (size_t i = 0; i < bytes; ++i) {
      value |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    }
    pos_ += bytes;
    return value;
  }

  absl::Status ReadLine(std::string* line) {
    const size_t end = data_.find('\n', pos_);
    if (end == absl::string_view::npos) return absl::InvalidArgumentError("truncated GLOBAL");
    *line = std::string(data_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return absl::OkStatus();
  }

  absl::Status PushString(size_t length_bytes) {
    VISION_RETURN_IF_ERROR(Need(length_bytes));
    const uint64_t length = ReadUnsigned(length_bytes);
    VISION_RETURN_IF_ERROR(Need(length));
    ValuePtr value = New(Value::Kind::kString);
    value->text = std::string(data_.substr(pos_, length));
    pos_ += length;
    stack_.push_back(std::move(value));
    return absl::OkStatus();
  }

  void PushInt(int64_t integer) {
    ValuePtr value = New(Value::Kind::kInt);
    value->integer = integer;
    stack_.push_back(std::move(value));
  }

  absl::Status NeedStack(size_t n) const {
    if (stack_.size() < n) return absl::InvalidArgumentError("stack underflow");
    return absl::OkStatus();
  }

  ValuePtr Pop() {
    ValuePtr value = std::move(stack_.back());
    stack_.pop_back();
    return value;
  }

  // Pops everything above the last MARK.
  absl::StatusOr<std::vector<ValuePtr>> PopToMark() {
    if (marks_.empty()) return absl::InvalidArgumentError("no MARK on the stack");
    const size_t mark = marks_.back();
    marks_.pop_back();
    if (mark > stack_.size()) return absl::InvalidArgumentError("MARK above the stack");
    std::vector<ValuePtr> items(std::make_move_iterator(stack_.begin() + mark),
                                std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }

  absl::Status PushTuple(std::vector<ValuePtr> items) {
    ValuePtr tuple = New(Value::Kind::kTuple);
    tuple->items = std::move(items);
    stack_.push_back(std::move(tuple));
    return absl::OkStatus();
  }

  absl::Status AddItems(const ValuePtr& target, const std::vector<ValuePtr>& items, bool pairs) {
    if (pairs) {
      if (target->kind != Value::Kind::kDict) {
        return absl::InvalidArgumentError(absl::StrCat("SETITEM(S) on a ", KindName(target->kind)));
      }
      if (items.size() % 2 != 0) return absl::InvalidArgumentError("odd SETITEMS");
      for (size_t i = 0; i < items.size(); i += 2) {
        target->entries.emplace_back(items[i], items[i + 1]);
      }
      return absl::OkStatus();
    }
    if (target->kind != Value::Kind::kList) {
      return absl::InvalidArgumentError(absl::StrCat("APPEND(S) on a ", KindName(target->kind)));
    }
    target->items.insert(target->items.end(), items.begin(), items.end());
    return absl::OkStatus();
  }

  absl::Status Memoize(uint64_t index) {
    VISION_RETURN_IF_ERROR(NeedStack(1));
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }

  absl::Status Recall(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("memo entry ", index, " is unset"));
    }
    stack_.push_back(it->second);
    return absl::OkStatus();
  }

  absl::Status PushGlobal(std::string module, std::string name) {
    ValuePtr global = New(Value::Kind::kGlobal);
    global->text = absl::StrCat(module, ".", name);
    stack_.push_back(std::move(global));
    return absl::OkStatus();
  }

  // ('storage', torch.FloatStorage, '<record>', '<location>', numel)
  absl::Status PersistentLoad(const ValuePtr& pid) {
    const auto& p = pid->items;
    if (pid->kind != Value::Kind::kTuple || p.size() < 5 || p[0]->kind != Value::Kind::kString ||
        p[0]->text != "storage" || p[1]->kind != Value::Kind::kGlobal ||
        p[2]->kind != Value::Kind::kString || p[4]->kind != Value::Kind::kInt) {
      return absl::InvalidArgumentError(
          "unsupported persistent id; only torch.save storages are understood");
    }
    ValuePtr storage = New(Value::Kind::kStorage);
    if (!StorageDtype(p[1]->text, &storage->dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported storage type '", p[1]->text, "'"));
    }
    storage->record = p[2]->text;
    storage->numel = p[4]->integer;
    stack_.push_back(std::move(storage));
    return absl::OkStatus();
  }

  static absl::Status IntTuple(const ValuePtr& value, std::vector<int64_t>* out) {
    if (value->kind != Value::Kind::kTuple) {
      return absl::InvalidArgumentError("tensor size/stride is not a tuple");
    }
    for (const ValuePtr& item : value->items) {
      if (item->kind != Value::Kind::kInt) {
        return absl::InvalidArgumentError("tensor size/stride holds a non-integer");
      }
      out->push_back(item->integer);
    }
    return absl::OkStatus();
  }

  // The callables torch.save emits for a state dict; anything else is rejected by name so a
  // user knows what their file contains.
  absl::Status Reduce(const ValuePtr& callable, const ValuePtr& args) {
    if (callable->kind != Value::Kind::kGlobal || args->kind != Value::Kind::kTuple) {
      return absl::InvalidArgumentError("REDUCE without a global and an argument tuple");
    }
    const std::string& name = callable->text;
    const auto& a = args->items;
    if (name == "collections.OrderedDict") {
      // Keys and values follow as SETITEMS; a non-empty argument is not what torch.save writes.
      if (!a.empty()) return absl::InvalidArgumentError("OrderedDict with constructor arguments");
      stack_.push_back(New(Value::Kind::kDict));
      return absl::OkStatus();
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      // (storage, storage_offset, size, stride[, requires_grad, backward_hooks[, metadata]])
      if (a.size() < 4 || a[0]->kind != Value::Kind::kStorage || a[1]->kind != Value::Kind::kInt) {
        return absl::InvalidArgumentError(absl::StrCat("malformed arguments to ", name));
      }
      ValuePtr tensor = New(Value::Kind::kTensor);
      tensor->storage = a[0];
      tensor->offset = a[1]->integer;
      VISION_RETURN_IF_ERROR(IntTuple(a[2], &tensor->sizes));
      VISION_RETURN_IF_ERROR(IntTuple(a[3], &tensor->strides));
      if (tensor->sizes.size() != tensor->strides.size()) {
        return absl::InvalidArgumentError("tensor size and stride differ in length");
      }
      stack_.push_back(std::move(tensor));
      return absl::OkStatus();
    }
    if (name == "torch._utils._rebuild_parameter") {
      // (data, requires_grad, backward_hooks): a state dict saved with keep_vars=True.
      if (a.empty() || a[0]->kind != Value::Kind::kTensor) {
        return absl::InvalidArgumentError("malformed arguments to _rebuild_parameter");
      }
      stack_.push_back(a[0]);
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("the file pickles '", name,
                     "', which is not part of a state dict of tensors; save model.state_dict()"));
  }

  absl::Status Step(uint8_t op) {
    switch (op) {
      case 0x80:  // PROTO
        VISION_RETURN_IF_ERROR(Need(1));
        ++pos_;
        return absl::OkStatus();
      case 0x95:  // FRAME: an 8-byte length; frames need no special handling here.
        VISION_RETURN_IF_ERROR(Need(8));
        pos_ += 8;
        return absl::OkStatus();
      case 'N':
        stack_.push_back(New(Value::Kind::kNone));
        return absl::OkStatus();
      case 0x88:    // NEWTRUE
      case 0x89: {  // NEWFALSE
        ValuePtr value = New(Value::Kind::kBool);
        value->integer = op == 0x88;
        stack_.push_back(std::move(value));
        return absl::OkStatus();
      }
      case 'J':  // BININT
        VISION_RETURN_IF_ERROR(Need(4));
        PushInt(static_cast<int32_t>(ReadUnsigned(4)));
        return absl::OkStatus();
      case 'K':  // BININT1
        VISION_RETURN_IF_ERROR(Need(1));
        PushInt(static_cast<int64_t>(ReadUnsigned(1)));
        return absl::OkStatus();
      case 'M':  // BININT2
        VISION_RETURN_IF_ERROR(Need(2));
        PushInt(static_cast<int64_t>(ReadUnsigned(2)));
        return absl::OkStatus();
      case 0x8a: {  // LONG1: n-byte two's-complement little endian
        VISION_RETURN_IF_ERROR(Need(1));
        const size_t n = ReadUnsigned(1);
        if (n > 8) return absl::InvalidArgumentError("integer wider than 64 bits");
        VISION_RETURN_IF_ERROR(Need(n));
        uint64_t bits = ReadUnsigned(n);
        if (n > 0 && n < 8 && (bits >> (8 * n - 1)) & 1) bits |= ~uint64_t{0} << (8 * n);
        PushInt(static_cast<int64_t>(bits));
        return absl::OkStatus();
      }
      case 'G': {  // BINFLOAT: big-endian double
        VISION_RETURN_IF_ERROR(Need(8));
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(data_[pos_ + i]);
        pos_ += 8;
        ValuePtr value = New(Value::Kind::kFloat);
        std::memcpy(&value->number, &bits, sizeof(bits));
        stack_.push_back(std::move(value));
        return absl::OkStatus();
      }
      case 'X':  // BINUNICODE
      case 'T':  // BINSTRING
        return PushString(4);
      case 0x8c:  // SHORT_BINUNICODE
      case 'U':   // SHORT_BINSTRING
        return PushString(1);
      case 0x8d:  // BINUNICODE8
        return PushString(8);
      case ')':
        return PushTuple({});
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        const size_t n = op - 0x84;
        VISION_RETURN_IF_ERROR(NeedStack(n));
        std::vector<ValuePtr> items(stack_.end() - n, stack_.end());
        stack_.resize(stack_.size() - n);
        return PushTuple(std::move(items));
      }
      case 't': {  // TUPLE
        VISION_ASSIGN_OR_RETURN(std::vector<ValuePtr> items, PopToMark());
        return PushTuple(std::move(items));
      }
      case ']':
        stack_.push_back(New(Value::Kind::kList));
        return absl::OkStatus();
      case 'l': {  // LIST
        VISION_ASSIGN_OR_RETURN(std::vector<ValuePtr> items, PopToMark());
        ValuePtr list = New(Value::Kind::kList);
        list->items = std::move(items);
        stack_.push_back(std::move(list));
        return absl::OkStatus();
      }
      case '}':
        stack_.push_back(New(Value::Kind::kDict));
        return absl::OkStatus();
      case 'd': {  // DICT
        VISION_ASSIGN_OR_RETURN(std::vector<ValuePtr> items, PopToMark());
        ValuePtr dict = New(Value::Kind::kDict);
        stack_.push_back(dict);
        return AddItems(dict, items, /*pairs=*/true);
      }
      case 'a':    // APPEND
      case 's': {  // SETITEM
        const size_t n = op == 'a' ? 1 : 2;
        VISION_RETURN_IF_ERROR(NeedStack(n + 1));
        std::vector<ValuePtr> items(stack_.end() - n, stack_.end());
        stack_.resize(stack_.size() - n);
        return AddItems(stack_.back(), items, /*pairs=*/op == 's');
      }
      case 'e':    // APPENDS
      case 'u': {  // SETITEMS
        VISION_ASSIGN_OR_RETURN(std::vector<ValuePtr> items, PopToMark());
        VISION_RETURN_IF_ERROR(NeedStack(1));
        return AddItems(stack_.back(), items, /*pairs=*/op == 'u');
      }
      case '(':  // MARK
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case '0':  // POP
        VISION_RETURN_IF_ERROR(NeedStack(1));
        stack_.pop_back();
        return absl::OkStatus();
      case '1': {  // POP_MARK
        absl::StatusOr<std::vector<ValuePtr>> items = PopToMark();
        return items.status();
      }
      case '2':  // DUP
        VISION_RETURN_IF_ERROR(NeedStack(1));
        stack_.push_back(stack_.back());
        return absl::OkStatus();
      case 'q':  // BINPUT
        VISION_RETURN_IF_ERROR(Need(1));
        return Memoize(ReadUnsigned(1));
      case 'r':  // LONG_BINPUT
        VISION_RETURN_IF_ERROR(Need(4));
        return Memoize(ReadUnsigned(4));
      case 0x94:  // MEMOIZE
        return Memoize(memo_.size());
      case 'h':  // BINGET
        VISION_RETURN_IF_ERROR(Need(1));
        return Recall(ReadUnsigned(1));
      case 'j':  // LONG_BINGET
        VISION_RETURN_IF_ERROR(Need(4));
        return Recall(ReadUnsigned(4));
      case 'c': {  // GLOBAL
        std::string module, name;
        VISION_RETURN_IF_ERROR(ReadLine(&module));
        VISION_RETURN_IF_ERROR(ReadLine(&name));
        return PushGlobal(std::move(module), std::move(name));
      }
      case 0x93: {  // STACK_GLOBAL
        VISION_RETURN_IF_ERROR(NeedStack(2));
        ValuePtr name = Pop();
        ValuePtr module = Pop();
        if (module->kind != Value::Kind::kString || name->kind != Value::Kind::kString) {
          return absl::InvalidArgumentError("STACK_GLOBAL without strings");
        }
        return PushGlobal(module->text, name->text);
      }
      case 'Q': {  // BINPERSID
        VISION_RETURN_IF_ERROR(NeedStack(1));
        return PersistentLoad(Pop());
      }
      case 'R': {  // REDUCE
        VISION_RETURN_IF_ERROR(NeedStack(2));
        ValuePtr args = Pop();
        ValuePtr callable = Pop();
        return Reduce(callable, args);
      }
      case 'b': {  // BUILD
        VISION_RETURN_IF_ERROR(NeedStack(2));
        ValuePtr state = Pop();
        // An OrderedDict's state is its __dict__: the state dict's _metadata (BatchNorm
        // versions), which LibTorch modules do not use.
        if (stack_.back()->kind != Value::Kind::kDict) {
          return absl::InvalidArgumentError(
              absl::StrCat("BUILD on a ", KindName(stack_.back()->kind)));
        }
        return absl::OkStatus();
      }
      default:
        return absl::InvalidArgumentError("unsupported pickle opcode");
    }
  }

  ValuePtr New(Value::Kind kind) {
    all_.push_back(MakeValue(kind));
    return all_.back();
  }

  absl::string_view data_;
  std::string where_;
  std::vector<ValuePtr> all_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, ValuePtr> memo_;
};

// Reads the storages of an archive, each once, as flat tensors.
class StorageLoader {
 public:
  StorageLoader(caffe2::serialize::PyTorchStreamReader* reader, std::string path,
                uint64_t archive_size)
      : reader_(reader), path_(std::move(path)), archive_size_(archive_size) {}

  absl::StatusOr<at::Tensor> Materialize(const Value& tensor, const std::string& key) {
    const Value& storage = *tensor.storage;
    VISION_ASSIGN_OR_RETURN(at::Tensor flat, Load(storage, key));
    // Check the view lies inside its storage before as_strided, which would not. Products are
    // checked for overflow: a hostile file can give any 64-bit size or stride.
    int64_t last = tensor.offset;
    int64_t numel = 1;
    bool overflow = false;
    // Every dimension's sign first: a zero size before a negative one must not reach at::empty
    // (which throws on the negative one).
    for (size_t d = 0; d < tensor.sizes.size(); ++d) {
      if (tensor.sizes[d] < 0 || tensor.strides[d] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("file '", path_, "': key '", key, "': negative tensor size or stride"));
      }
    }
    for (size_t d = 0; d < tensor.sizes.size(); ++d) {
      if (tensor.sizes[d] == 0) return at::empty(tensor.sizes, flat.options());
      int64_t reach = 0;
      overflow |= __builtin_mul_overflow(tensor.sizes[d] - 1, tensor.strides[d], &reach);
      overflow |= __builtin_add_overflow(last, reach, &last);
      overflow |= __builtin_mul_overflow(numel, tensor.sizes[d], &numel);
    }
    if (overflow) {
      return absl::InvalidArgumentError(absl::StrCat(
          "file '", path_, "': key '", key, "': tensor sizes and strides overflow 64 bits"));
    }
    if (tensor.offset < 0 || last >= storage.numel) {
      return absl::InvalidArgumentError(
          absl::StrCat("file '", path_, "': key '", key, "': the tensor reaches element ", last,
                       " of a storage of ", storage.numel, " elements"));
    }
    return flat.as_strided(tensor.sizes, tensor.strides, tensor.offset);
  }

 private:
  absl::StatusOr<at::Tensor> Load(const Value& storage, const std::string& key) {
    // Keyed by record and element type: tensors of two dtypes may share one storage.
    const std::string cache_key = absl::StrCat(storage.record, "/", c10::toString(storage.dtype));
    auto it = loaded_.find(cache_key);
    if (it != loaded_.end() && it->second.numel() == storage.numel) return it->second;
    const std::string record = absl::StrCat("data/", storage.record);
    const auto where = [&] {
      return absl::StrCat("file '", path_, "': key '", key, "': record '", record, "'");
    };
    try {
      if (!reader_->hasRecord(record)) {
        return absl::InvalidArgumentError(absl::StrCat(where(), " is missing from the archive"));
      }
      const size_t size = reader_->getRecordSize(record);
      const size_t element_size = c10::elementSize(storage.dtype);
      // Compared by division: numel * element_size may overflow.
      if (storage.numel < 0 || size % element_size != 0 ||
          static_cast<uint64_t>(storage.numel) != size / element_size) {
        const std::string expected =
            storage.numel >= 0 && static_cast<uint64_t>(storage.numel) <= SIZE_MAX / element_size
                ? absl::StrCat(static_cast<uint64_t>(storage.numel) * element_size)
                : std::string("an impossible size");
        return absl::InvalidArgumentError(absl::StrCat(where(), " has ", size, " bytes, expected ",
                                                       expected, " for ", storage.numel, " ",
                                                       c10::toString(storage.dtype), " elements"));
      }
      if (size > archive_size_) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), " declares ", size, " bytes, more than the archive's ", archive_size_,
            " (a compressed or corrupt archive; torch.save writes records uncompressed)"));
      }
      // Allocated only now that the size is known to be backed by the archive.
      at::Tensor flat = at::empty({storage.numel}, at::TensorOptions().dtype(storage.dtype));
      if (size > 0) reader_->getRecord(record, flat.data_ptr(), size);
      loaded_.insert_or_assign(cache_key, flat);
      return flat;
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), " is unreadable: ", e.what_without_backtrace()));
    }
  }

  caffe2::serialize::PyTorchStreamReader* reader_;
  std::string path_;
  uint64_t archive_size_;
  std::map<std::string, at::Tensor> loaded_;
};

std::string ShapeString(at::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

bool IsNumBatchesTracked(const std::string& key) {
  static constexpr absl::string_view kSuffix = "num_batches_tracked";
  return key.size() >= kSuffix.size() &&
         absl::string_view(key).substr(key.size() - kSuffix.size()) == kSuffix;
}

}  // namespace

namespace {

// Reads the archive from a buffer; reads outside it return fewer bytes (the zip reader then
// reports a truncated archive) instead of copying from past its end.
class BufferReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BufferReadAdapter(absl::string_view data) : data_(data) {}
  size_t size() const override { return data_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what = "") const override {
    if (pos >= data_.size()) return 0;
    const size_t count = std::min<uint64_t>(n, data_.size() - pos);
    std::memcpy(buf, data_.data() + pos, count);
    return count;
  }

 private:
  absl::string_view data_;
};

bool IsLegacyFormat(absl::string_view head) {
  return head.size() >= 2 && static_cast<uint8_t>(head[0]) == 0x80 && head[1] == 0x02;
}

absl::Status LegacyFormatError(const std::string& path) {
  return absl::InvalidArgumentError(absl::StrCat(
      "weights file '", path,
      "' uses the legacy torch.save format of PyTorch < 1.6; re-save it in Python with "
      "torch.save(torch.load(p), p) using PyTorch >= 1.6"));
}

// Parses an opened archive of `archive_size` bytes. No record larger than the archive is read:
// torch.save stores records uncompressed, and a hostile file could otherwise declare a huge
// size that is allocated before it fails.
absl::StatusOr<StateDict> ReadArchive(
    const std::function<std::unique_ptr<caffe2::serialize::PyTorchStreamReader>()>& open,
    const std::string& path, uint64_t archive_size) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::string pickle;
  const auto check_size = [&](const std::string& record) -> absl::Status {
    const size_t size = reader->getRecordSize(record);
    if (size > archive_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weights file '", path, "': record '", record, "' declares ", size,
          " bytes, more than the archive's ", archive_size,
          " (a compressed or corrupt archive; torch.save writes records uncompressed)"));
    }
    return absl::OkStatus();
  };
  try {
    reader = open();
    if (!reader->hasRecord("data.pkl")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weights file '", path,
          "' is a PyTorch archive without data.pkl (a TorchScript module "
          "or torch.package?); save the state dict with torch.save(model.state_dict(), p)"));
    }
    if (reader->hasRecord("byteorder")) {
      VISION_RETURN_IF_ERROR(check_size("byteorder"));
      auto [order, order_size] = reader->getRecord("byteorder");
      const std::string byteorder(static_cast<const char*>(order.get()), order_size);
      if (byteorder != "little") {
        return absl::InvalidArgumentError(
            absl::StrCat("weights file '", path, "' was saved with byte order '", byteorder,
                         "'; only little-endian files are supported"));
      }
    }
    VISION_RETURN_IF_ERROR(check_size("data.pkl"));
    pickle.resize(reader->getRecordSize("data.pkl"));
    reader->getRecord("data.pkl", pickle.data(), pickle.size());
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights file '", path,
                     "' is not a readable torch.save zip archive: ", e.what_without_backtrace()));
  }

  Unpickler unpickler(pickle, absl::StrCat("weights file '", path, "': data.pkl"));
  VISION_ASSIGN_OR_RETURN(ValuePtr root, unpickler.Run());
  if (root->kind != Value::Kind::kDict) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights file '", path, "' holds a ", KindName(root->kind),
                     ", not a state dict; save it with torch.save(model.state_dict(), p)"));
  }

  StorageLoader storages(reader.get(), path, archive_size);
  StateDict state;
  std::set<std::string> seen;
  for (const auto& [key, value] : root->entries) {
    if (key->kind != Value::Kind::kString) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weights file '", path, "' has a ", KindName(key->kind), " key; expected str keys"));
    }
    if (value->kind != Value::Kind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weights file '", path, "': key '", key->text, "' holds a ", KindName(value->kind),
          ", not a tensor. A training checkpoint? Save only its state dict, e.g. "
          "torch.save(ckpt['state_dict'], p)"));
    }
    if (!seen.insert(key->text).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights file '", path, "': key '", key->text, "' appears twice"));
    }
    VISION_ASSIGN_OR_RETURN(at::Tensor tensor, storages.Materialize(*value, key->text));
    state.emplace_back(key->text, std::move(tensor));
  }
  return state;
}

}  // namespace

absl::StatusOr<StateDict> ReadTorchStateDict(const std::string& path) {
  std::error_code error;
  const uint64_t archive_size = std::filesystem::file_size(path, error);
  {
    std::ifstream file(path, std::ios::binary);
    if (!file || error) {
      return absl::NotFoundError(
          absl::StrCat("weights file '", path, "' does not exist or is not readable"));
    }
    // Before PyTorch 1.6 torch.save wrote a bare pickle stream (starting with PROTO 2).
    char head[2] = {0, 0};
    file.read(head, 2);
    if (IsLegacyFormat(absl::string_view(head, file.gcount()))) return LegacyFormatError(path);
  }
  return ReadArchive([&] { return std::make_unique<caffe2::serialize::PyTorchStreamReader>(path); },
                     path, archive_size);
}

absl::StatusOr<StateDict> ReadTorchStateDictFromBuffer(absl::string_view data,
                                                       const std::string& name) {
  if (IsLegacyFormat(data)) return LegacyFormatError(name);
  return ReadArchive(
      [&] {
        return std::make_unique<caffe2::serialize::PyTorchStreamReader>(
            std::make_shared<BufferReadAdapter>(data));
      },
      name, data.size());
}

std::string ImportReport::ToString() const {
  std::string out = absl::StrCat(loaded.size(), " tensors match, ", ignored.size(), " ignored");
  if (!added.empty()) {
    absl::StrAppend(&out, ", ", added.size(), " new in the module (kept as initialised)");
  }
  const auto add = [&out](const char* what, const std::vector<std::string>& keys) {
    if (!keys.empty()) absl::StrAppend(&out, "\n", what, ": ", absl::StrJoin(keys, ", "));
  };
  add("missing from the file", missing);
  add("unexpected in the file", unexpected);
  add("shape mismatch", mismatched);
  return out;
}

absl::StatusOr<ImportReport> LoadStateDict(const StateDict& state, torch::nn::Module& module,
                                           bool strict, const std::string& source,
                                           const std::vector<std::string>& new_keys) {
  std::map<std::string, at::Tensor> targets;
  for (const auto& item : module.named_parameters()) targets.emplace(item.key(), item.value());
  for (const auto& item : module.named_buffers()) targets.emplace(item.key(), item.value());

  ImportReport report;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (target, source)
  std::set<std::string> in_file;
  for (const auto& [key, tensor] : state) {
    in_file.insert(key);
    auto it = targets.find(key);
    if (it == targets.end()) {
      (IsNumBatchesTracked(key) ? report.ignored : report.unexpected).push_back(key);
      continue;
    }
    if (!it->second.sizes().equals(tensor.sizes())) {
      report.mismatched.push_back(absl::StrCat(key, ": file ", ShapeString(tensor.sizes()),
                                               ", module ", ShapeString(it->second.sizes())));
      continue;
    }
    copies.emplace_back(it->second, tensor);
    report.loaded.push_back(key);
  }
  const std::set<std::string> added(new_keys.begin(), new_keys.end());
  for (const auto& [key, tensor] : targets) {
    if (in_file.count(key) == 0) {
      if (IsNumBatchesTracked(key)) {
        report.ignored.push_back(key);
      } else {
        (added.count(key) > 0 ? report.added : report.missing).push_back(key);
      }
    }
  }
  if (strict && !report.complete()) {
    return absl::FailedPreconditionError(absl::StrCat(
        source,
        " does not match the module (strict loading; nothing was copied): ", report.ToString()));
  }
  try {
    torch::NoGradGuard no_grad;
    for (auto& [target, value] : copies) target.copy_(value);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("copying ", source, " into the module failed: ", e.what_without_backtrace()));
  }
  return report;
}

absl::StatusOr<ImportReport> ImportTorchvisionWeights(const std::string& path,
                                                      torch::nn::Module& module, bool strict) {
  VISION_ASSIGN_OR_RETURN(StateDict state, ReadTorchStateDict(path));
  return LoadStateDict(state, module, strict, absl::StrCat("weights file '", path, "'"));
}

}  // namespace vision::models::backbones
