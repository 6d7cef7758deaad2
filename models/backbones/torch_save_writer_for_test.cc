#include "models/backbones/torch_save_writer_for_test.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

namespace vision::models::backbones::testing {
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
    case at::kFloat: return "FloatStorage";
    case at::kDouble: return "DoubleStorage";
    case at::kHalf: return "HalfStorage";
    case at::kLong: return "LongStorage";
    case at::kInt: return "IntStorage";
    case at::kByte: return "ByteStorage";
    case at::kBool: return "BoolStorage";
    default: TORCH_CHECK(false, "no storage class for ", dtype);
  }
}

}  // namespace

std::string PickleStateDict(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                            DictKind kind) {
  PickleWriter w;
  w.Op('\x80');
  w.Op('\x02');
  if (kind == DictKind::kOrderedDict) {
    w.EmptyOrderedDict();
  } else {
    w.Op('}');
  }
  w.Op('(');
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i].second;
    w.Unicode(tensors[i].first);
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
    w.Op('\x89');  // requires_grad = False
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

void WriteTorchSave(const std::string& path,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                    DictKind kind) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  const std::string pickle = PickleStateDict(tensors, kind);
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor t = tensors[i].second.contiguous();
    writer.writeRecord("data/" + std::to_string(i), t.data_ptr(), t.nbytes());
  }
  writer.writeEndOfFile();
}

}  // namespace vision::models::backbones::testing
