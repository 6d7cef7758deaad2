// A guard for the recursive parsers and printers of untrusted text. protobuf's text-format
// parser recurses once per nested message (its recursion limit does not reach into Any
// payloads or google.protobuf.Struct values), and nlohmann's dump() once per nested list or
// object: a few hundred kilobytes of "[[[[..." or "a { a { ..." overflow a thread's stack and
// kill the process without a message. Every reader of such text scans it with
// FindExcessNesting first (or, when it streams a file, keeps the same count itself) and
// refuses what nests deeper than kMaxNestingDepth.
//
// Why 100: the deepest value of a COCO instances file is 4 levels below the root (root,
// "annotations", an annotation, "segmentation", a polygon), and the deepest shipped config 8
// ("model { options { [Any] { backbone { options { [Any] { ... } } } } } }"): 100 leaves room
// for any exporter's or user's extra wrapping, is protobuf's own default for binary input,
// and keeps the recursion of every parser here under 100 frames (well under 1 MiB of stack
// even for nlohmann's largest frames), so a worker thread's smaller stack is safe too.
#ifndef VISION_CORE_NESTING_H_
#define VISION_CORE_NESTING_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace vision::core {

inline constexpr int kMaxNestingDepth = 100;

enum class TextSyntax {
  // "..." strings with backslash escapes; [ ] and { } nest.
  kJson,
  // protobuf text format: "..." and '...' strings with backslash escapes, # comments to the
  // end of the line; { }, < > and [ ] nest.
  kProtoText,
};

// The byte offset of the first opening bracket at depth max_depth + 1 (outside strings and
// comments), or nullopt when `text` never nests deeper than `max_depth`. Brackets need not
// balance: the parser reports syntax errors, this finds only the depth. Linear, no recursion.
std::optional<size_t> FindExcessNesting(absl::string_view text, TextSyntax syntax,
                                        int max_depth = kMaxNestingDepth);

// "<source>: line L, column C (byte B): lists and objects nest more than 100 deep; ..." for
// the offset FindExcessNesting returned; `what` names the expected content and its usual
// depth ("a COCO instances file nests at most 5 deep").
absl::Status ExcessNestingError(absl::string_view source, absl::string_view text, size_t offset,
                                absl::string_view what, int max_depth = kMaxNestingDepth);

// Both: OK, or the error above.
absl::Status CheckNesting(absl::string_view source, absl::string_view text, TextSyntax syntax,
                          absl::string_view what, int max_depth = kMaxNestingDepth);

}  // namespace vision::core

#endif  // VISION_CORE_NESTING_H_
