// Reading image files so that a damaged file is an error naming it, never a silently grey or
// half-grey image (README, "Data policies"). OpenCV's decoders accept a JPEG cut off mid-scan
// and fill in its lower part (libjpeg prints a warning that names no file to stderr, and
// cv::redirectError does not see it), and they accept a PNG whose trailing chunks are missing.
// So before decoding, the file's container structure is walked, which is cheap (a memchr over
// the compressed data, well under a millisecond for a 1280 x 720 JPEG; see
// image_io_benchmark):
//  - JPEG: SOI, then marker segments whose lengths must stay within the file, each scan's
//    compressed data up to the next marker (restart markers must come in sequence), up to
//    EOI. A file that ends before EOI is truncated; bytes between segments that are no marker
//    (libjpeg's "extraneous bytes before marker") and out-of-sequence restart markers are
//    corrupt. Bytes after EOI are allowed, as libjpeg allows them.
//  - PNG: the signature, then chunks whose lengths must stay within the file, up to IEND.
// JPEGs are then decoded with libjpeg-turbo (the library OpenCV's decoder uses) under an error
// manager of our own, which sees damage inside complete compressed data (flipped bits in a
// scan): libjpeg's warnings ("Corrupt JPEG data: bad Huffman code", "... N extraneous bytes
// before marker 0xd9", "... premature end of data segment", "Inconsistent progression
// sequence", ...) are an error quoting the first one (decoding stops there), and nothing is
// printed to stderr. Two warnings about metadata only (unknown JFIF version, bad ICC marker) are
// ignored. A Huffman-coded header claiming more 8 x 8 blocks than the file has bits is refused
// before anything is allocated (a few damaged bytes cannot make it decode 2^30 pixels). The pixels
// are cv::imdecode's: the same library, colour space (BGR or grey), DCT and upsampling as
// OpenCV, the same EXIF orientation; where OpenCV does more (CMYK/YCCK files, an EXIF
// orientation other than 1, no Huffman tables, flags other than IMREAD_COLOR, IMREAD_GRAYSCALE
// and IMREAD_UNCHANGED), libjpeg decodes as a check and cv::imdecode's image is returned (the
// decoding time doubles for those files only).
// BMP, TIFF and WebP are decoded as they are. Every other format is refused before any decoder
// sees it: OpenCV's build also carries decoders for DICOM, JPEG 2000, OpenEXR, Radiance HDR,
// PxM, Sun raster and GDAL formats, and picks one by the file's signature, so a damaged file that
// happens to look like one of them reaches code no dataset needs (fuzzing found a DICOM-looking
// input that aborts the process inside GDCM).
// Decompression bombs (as PIL's Image.MAX_IMAGE_PIXELS): a few hundred bytes can claim a huge
// image, so every format's dimensions are read from its header and checked against a pixel
// limit before any decoder allocates the image (a DataLoss error naming the limit's setting):
//  - JPEG: libjpeg's header (jpeg_read_header), before jpeg_start_decompress allocates; where
//    libjpeg buffers the whole image's DCT coefficients (progressive and other multi-scan
//    files), each component's buffer, padded to whole MCUs as libjpeg pads it, counts as an
//    image of that many pixels too. Arithmetic coding has no other bound (see image_io.cc).
//  - PNG: the IHDR chunk, which must come first (libpng refuses the file otherwise).
//  - BMP: the DIB header's width and height, as OpenCV reads them.
//  - TIFF: the first image directory's width and length, and the tile or strip OpenCV
//    buffers whole (its tile size, or the width times the rows per strip).
//  - WebP: the first chunk's (VP8, VP8L or VP8X) width and height.
// OpenCV's own limit (OPENCV_IO_MAX_IMAGE_PIXELS, 2^30) is read from the environment once,
// when the library loads, so it cannot follow a config; it stays as a ceiling.
// The worst case per decode at a limit of L pixels: the decoded image (3 bytes per pixel for
// the colour images the datasets read; read unchanged, as label maps are, up to 8 for a 16-bit
// RGBA PNG and 32 for a 4-channel float64 TIFF) plus, for a multi-scan JPEG, 2 bytes per pixel
// per component (at most 4) of coefficients; OpenCV's tile buffer for a TIFF is another 4 bytes
// per pixel of a tile (at most 1 GiB, OpenCV's check). At the default of 2^28 pixels (16384 x
// 16384): 768 MiB for a baseline colour JPEG or PNG, 2.25 GiB for a progressive 4:4:4 colour
// JPEG, 3 GiB for a progressive CMYK JPEG (12 bytes per pixel, the JPEG worst case).
// What is still not seen: damage that leaves a valid bitstream (a flipped bit inside a DC or AC
// coefficient's value bits, or a Huffman code changed into another valid code: the image decodes
// with wrong blocks and libjpeg has nothing to say), and damage inside PNG, BMP, TIFF and WebP
// data beyond what their decoders refuse themselves (their warnings, libpng's for one, still go
// through OpenCV and are not seen).
#ifndef VISION_CORE_IMAGE_IO_H_
#define VISION_CORE_IMAGE_IO_H_

#include <cstdint>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vision::core {

// The default pixel limit, 2^28 = 16384 x 16384: 2.7 times a 10000 x 10000 satellite or
// slide tile, 128 times a Cityscapes image (2048 x 1024). WebP cannot exceed it (16383 x 16383
// at most).
inline constexpr int64_t kDefaultMaxImagePixels = int64_t{1} << 28;
// OpenCV's own limit, the largest limit that can be set (cv::imdecode refuses more).
inline constexpr int64_t kLargestMaxImagePixels = int64_t{1} << 30;

// The pixel limit DecodeImage and ReadImage apply on the calling thread: the innermost live
// ScopedMaxImagePixels's, else kDefaultMaxImagePixels.
int64_t MaxImagePixels();

// Sets the pixel limit of DecodeImage and ReadImage on the constructing thread while it lives
// (scopes nest; the previous limit returns when it ends). `setting` names where the limit is
// configured ("train_data.max_image_pixels"), for the error message; it must outlive the scope.
// core::BuildDataset wraps every dataset's Load in one, so that DataConfig.max_image_pixels
// reaches every image a dataset reads (on the thread that calls Load).
class ScopedMaxImagePixels {
 public:
  // `max_pixels` in [1, kLargestMaxImagePixels] (clamped into it).
  ScopedMaxImagePixels(int64_t max_pixels, absl::string_view setting);
  ~ScopedMaxImagePixels();
  ScopedMaxImagePixels(const ScopedMaxImagePixels&) = delete;
  ScopedMaxImagePixels& operator=(const ScopedMaxImagePixels&) = delete;

 private:
  int64_t previous_pixels_;
  absl::string_view previous_setting_;
};

// The structural check alone, on a file's bytes; the message names no file. OK for formats it
// does not recognise.
absl::Status CheckImageStructure(absl::string_view bytes);

// Which of the accepted formats `bytes` starts with ("JPEG", "PNG", "BMP", "TIFF", "WebP"), or
// an empty view when none.
absl::string_view SniffImageFormat(absl::string_view bytes);

// cv::imdecode(bytes, flags) for the accepted formats, after the structural check (JPEGs decoded
// by libjpeg directly, same pixels; see above): an unaccepted format, a damaged file (libjpeg's
// warnings included), one above MaxImagePixels() or an undecodable one is an error (DataLoss)
// whose message names no file;
// `what` names the kind of file ("image", "label map").
absl::StatusOr<cv::Mat> DecodeImage(absl::string_view bytes, int flags = cv::IMREAD_COLOR,
                                    absl::string_view what = "image");

// DecodeImage on the file's bytes: a missing, empty, truncated, corrupt or undecodable file, or
// one in a format not accepted, is an error (NotFound or DataLoss) whose message starts with
// `path`; `what` names the file in messages ("image", "label map").
absl::StatusOr<cv::Mat> ReadImage(const std::string& path, int flags = cv::IMREAD_COLOR,
                                  absl::string_view what = "image");

}  // namespace vision::core

#endif  // VISION_CORE_IMAGE_IO_H_
