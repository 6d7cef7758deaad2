#include "core/nesting.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vision::core {

std::optional<size_t> FindExcessNesting(absl::string_view text, TextSyntax syntax,
                                        int max_depth) {
  const bool proto = syntax == TextSyntax::kProtoText;
  int depth = 0;
  char quote = 0;  // the open string's quote, 0 outside strings
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;  // the escaped byte
      } else if (c == quote || (proto && c == '\n')) {
        quote = 0;  // a text-format string cannot span lines: the parser reports it
      }
      continue;
    }
    switch (c) {
      case '"':
        quote = c;
        break;
      case '\'':
        if (proto) quote = c;
        break;
      case '#':
        if (proto) {
          const size_t end = text.find('\n', i);
          if (end == absl::string_view::npos) return std::nullopt;
          i = end;
        }
        break;
      case '[':
      case '{':
        if (++depth > max_depth) return i;
        break;
      case '<':
        if (proto && ++depth > max_depth) return i;
        break;
      case ']':
      case '}':
        depth = std::max(depth - 1, 0);
        break;
      case '>':
        if (proto) depth = std::max(depth - 1, 0);
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

absl::Status ExcessNestingError(absl::string_view source, absl::string_view text, size_t offset,
                                absl::string_view what, int max_depth) {
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": line ", line, ", column ", offset - line_start + 1, " (byte ", offset,
      "): brackets nest more than ", max_depth, " deep; ", what,
      ", so the file is damaged or not what it should be (refused before parsing, because "
      "nesting this deep would exhaust the parser's stack)"));
}

absl::Status CheckNesting(absl::string_view source, absl::string_view text, TextSyntax syntax,
                          absl::string_view what, int max_depth) {
  const std::optional<size_t> offset = FindExcessNesting(text, syntax, max_depth);
  if (!offset.has_value()) return absl::OkStatus();
  return ExcessNestingError(source, text, *offset, what, max_depth);
}

}  // namespace vision::core
