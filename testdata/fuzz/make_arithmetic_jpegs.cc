// Writes the arithmetic-coded JPEG regression inputs of //tools/fuzz:image_decode_fuzz_test:
// a 16 x 16 flat grey colour picture coded with arithmetic coding (sequential and progressive),
// whose frame header (SOF9 / SOF10) is then patched to claim 32768 x 32768 pixels, 2^30, OpenCV's
// own limit. The scans' data runs out after 16 x 16 pixels; libjpeg's arithmetic decoder then
// reads zeros, without a warning for the sequential file, so before the pixel limit the 206-byte
// file decoded a 3 GiB image, and the progressive one allocated a 3 GiB coefficient buffer
// (4:2:0, 2 bytes per coefficient) before libjpeg found a bad arithmetic code in the zeros.
// Each must now be refused before anything is allocated. Needs libjpeg-turbo's headers
// (libjpeg62-turbo-dev):
//
//   g++ -O2 -o /tmp/make_arithmetic_jpegs testdata/fuzz/make_arithmetic_jpegs.cc -ljpeg
//   /tmp/make_arithmetic_jpegs testdata/fuzz/image_decode
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
// clang-format off
#include <jpeglib.h>
// clang-format on

namespace {

std::vector<unsigned char> EncodeFlat(bool progressive) {
  constexpr int kSide = 16;
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = kSide;
  cinfo.image_height = kSide;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  cinfo.arith_code = TRUE;
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<unsigned char> row(kSide * 3, 128);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW rows[] = {row.data()};
    jpeg_write_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<unsigned char> bytes(buffer, buffer + size);
  std::free(buffer);
  return bytes;
}

// Sets the frame header's (SOF9 or SOF10) height and width.
bool PatchSize(std::vector<unsigned char>* bytes, int width, int height) {
  for (size_t i = 2; i + 8 < bytes->size();) {
    const unsigned char marker = (*bytes)[i + 1];
    if (marker == 0xC9 || marker == 0xCA) {
      (*bytes)[i + 5] = static_cast<unsigned char>(height >> 8);
      (*bytes)[i + 6] = static_cast<unsigned char>(height & 0xFF);
      (*bytes)[i + 7] = static_cast<unsigned char>(width >> 8);
      (*bytes)[i + 8] = static_cast<unsigned char>(width & 0xFF);
      return true;
    }
    i += 2 + ((size_t{(*bytes)[i + 2]} << 8) | (*bytes)[i + 3]);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  for (const bool progressive : {false, true}) {
    std::vector<unsigned char> bytes = EncodeFlat(progressive);
    if (!PatchSize(&bytes, 32768, 32768)) {
      std::fprintf(stderr, "no arithmetic-coded frame header\n");
      return 1;
    }
    const std::string path = std::string(argv[1]) + "/regression_arithmetic_" +
                             (progressive ? "progressive_" : "") + "32768x32768_in_" +
                             std::to_string(bytes.size()) + "_bytes_oom.jpg";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("%s\n", path.c_str());
  }
  return 0;
}
