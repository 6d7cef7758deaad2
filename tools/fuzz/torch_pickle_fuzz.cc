// Fuzzes the pickle interpreter of the weight-file reader (models/backbones/
// torchvision_import.h) directly: the input is data.pkl of an archive whose other records are
// fixed (storages data/0 of 16 bytes and data/1 of 64 bytes, byteorder "little"), so that
// mutations go to the opcodes and the tensor arguments instead of the zip structure.
#include <caffe2/serialize/inline_container.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "tools/fuzz/state_dict_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string archive;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&archive](const void* bytes, size_t n) {
      archive.append(static_cast<const char*>(bytes), n);
      return n;
    });
    writer.writeRecord("data.pkl", data, size);
    writer.writeRecord("byteorder", "little", 6);
    const std::string storage0(16, '\x01');
    const std::string storage1(64, '\x02');
    writer.writeRecord("data/0", storage0.data(), storage0.size());
    writer.writeRecord("data/1", storage1.data(), storage1.size());
    writer.writeEndOfFile();
  }
  vision::fuzz::CheckStateDictReader(archive);
  return 0;
}
