#include "clients/cli/escape.h"

namespace llamafleet::cli {
namespace escape_internal {

void AppendEscape(unsigned char c, bool c1, std::string* out) {
  static const char* kHex = "0123456789abcdef";
  if (c1) {
    out->append("\\u00");
  } else if (c == '\r') {
    out->append("\\r");
    return;
  } else {
    out->append("\\x");
  }
  out->push_back(kHex[c >> 4]);
  out->push_back(kHex[c & 15]);
}

bool IsControl(unsigned char c) { return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f; }

}  // namespace escape_internal

using escape_internal::AppendEscape;
using escape_internal::IsControl;

std::string EscapeControls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0xc2 && i + 1 < text.size()) {
      const unsigned char next = static_cast<unsigned char>(text[i + 1]);
      if (next >= 0x80 && next <= 0x9f) {
        AppendEscape(next, /*c1=*/true, &out);
        ++i;
        continue;
      }
    }
    if (IsControl(c)) {
      AppendEscape(c, /*c1=*/false, &out);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace llamafleet::cli
