#include "models/backbones/torch_save_writer.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/atomic_output.h"

namespace vision::models::backbones {
namespace {

class PickleWriter {
 public:
  void Op(char op) { out_.push_back(op); }
  void Global(const std::string& module, const std::string& name) {
    Op('c');
    out_ += module + "\n" + name + "\n";
  }
  void Unicode(const std::string& text) {
    Op('X');
    Unsigned(text.size(), 4);
    out_ += text;
  }
  void Int(int64_t value) {
    if (value >= 0 && value < 256) {
      Op('K');
      Unsigned(value, 1);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
      Op('J');
      Unsigned(static_cast<uint32_t>(value), 4);
    } else {
      Op('\x8a');
      Unsigned(8, 1);
      Unsigned(static_cast<uint64_t>(value), 8);
    }
  }
  void IntTuple(at::IntArrayRef values) {
    Op('(');
    for (int64_t v : values) Int(v);
    Op('t');
  }
  void EmptyOrderedDict() {
    Global("collections", "OrderedDict");
    Op(')');
    Op('R');
  }
  const std::string& bytes() const { return out_; }

 private:
  void Unsigned(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  std::string out_;
};

std::string StorageClass(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "FloatStorage";
    case at::kDouble:
      return "DoubleStorage";
    case at::kHalf:
      return "HalfStorage";
    case at::kBFloat16:
      return "BFloat16Storage";
    case at::kLong:
      return "LongStorage";
    case at::kInt:
      return "IntStorage";
    case at::kShort:
      return "ShortStorage";
    case at::kChar:
      return "CharStorage";
    case at::kByte:
      return "ByteStorage";
    case at::kBool:
      return "BoolStorage";
    default:
      TORCH_CHECK(false, "torch.save writer: no storage class for dtype ", dtype);
  }
}

}  // namespace

std::string PickleStateDict(const StateDict& state, DictKind kind) {
  PickleWriter w;
  w.Op('\x80');
  w.Op('\x02');
  if (kind == DictKind::kOrderedDict) {
    w.EmptyOrderedDict();
  } else {
    w.Op('}');
  }
  w.Op('(');
  for (size_t i = 0; i < state.size(); ++i) {
    const at::Tensor& t = state[i].second;
    w.Unicode(state[i].first);
    w.Global("torch._utils", "_rebuild_tensor_v2");
    w.Op('(');
    w.Op('(');
    w.Unicode("storage");
    w.Global("torch", StorageClass(t.scalar_type()));
    w.Unicode(std::to_string(i));
    w.Unicode("cpu");
    w.Int(t.numel());
    w.Op('t');
    w.Op('Q');
    w.Int(0);
    w.IntTuple(t.sizes());
    w.IntTuple(at::empty(t.sizes()).strides());
    w.Op('\x89');          // requires_grad = False
    w.EmptyOrderedDict();  // backward hooks
    w.Op('t');
    w.Op('R');
  }
  w.Op('u');
  if (kind == DictKind::kOrderedDict) {
    // The OrderedDict's __dict__: {'_metadata': OrderedDict()}.
    w.Op('}');
    w.Unicode("_metadata");
    w.EmptyOrderedDict();
    w.Op('s');
    w.Op('b');
  }
  w.Op('.');
  return w.bytes();
}

absl::Status WriteTorchStateDict(const StateDict& state, const std::string& path, DictKind kind) {
  std::string pickle;
  try {
    pickle = PickleStateDict(state, kind);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write '", path, "': ", e.what_without_backtrace()));
  }
  const std::string tmp = absl::StrCat(path, ".partial-", ::getpid());
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write '", path, "': creating '", tmp, "' failed: ", std::strerror(errno),
        " (does the directory exist, and may you write to it?)"));
  }
  bool write_ok = true;
  int write_errno = 0;
  std::string torch_error;
  try {
    // The writer-function form names the archive's top folder "archive", as torch.save to a
    // buffer does; torch.load accepts any name.
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      if (write_ok && std::fwrite(data, 1, size, file) != size) {
        write_ok = false;
        write_errno = errno;
      }
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    for (size_t i = 0; i < state.size(); ++i) {
      const at::Tensor t = state[i].second.detach().to(at::kCPU).contiguous();
      writer.writeRecord("data/" + std::to_string(i), t.data_ptr(), t.nbytes());
    }
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    torch_error = e.what_without_backtrace();
  }
  if (write_ok && std::fflush(file) != 0) {
    write_ok = false;
    write_errno = errno;
  }
  if (write_ok && ::fsync(::fileno(file)) != 0) {
    write_ok = false;
    write_errno = errno;
  }
  std::fclose(file);
  if (!torch_error.empty() || !write_ok) {
    std::remove(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot write '", path,
                     "': ", torch_error.empty() ? std::strerror(write_errno) : torch_error.c_str(),
                     " (nothing was written under that name)"));
  }
  if (absl::Status status = core::RenameDurably(tmp, path); !status.ok()) {
    std::remove(tmp.c_str());
    return absl::Status(status.code(),
                        absl::StrCat("cannot put '", path, "' into place: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace vision::models::backbones
