#include "clients/cli/escape.h"

namespace llamafleet::cli {
namespace {

// Appends the visible form of control byte `c` (of C1 control U+0080 + (c - 0x80) when
// `c1`).
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

// A C0 control other than '\n' and '\t', or DEL.
bool IsControl(unsigned char c) { return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f; }

}  // namespace

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

std::string EscapeTableCell(std::string_view text) {
  std::string flat;
  flat.reserve(text.size());
  for (char c : text) {
    if (c == '\n') {
      flat.append("\\n");
    } else if (c == '\t') {
      flat.append("\\t");
    } else {
      flat.push_back(c);
    }
  }
  return EscapeControls(flat);
}

EscapingStreambuf::~EscapingStreambuf() {
  if (pending_c2_) target_->sputc(static_cast<char>(0xc2));
}

void EscapingStreambuf::Put(unsigned char c) {
  std::string escaped;
  if (pending_c2_) {
    pending_c2_ = false;
    if (c >= 0x80 && c <= 0x9f) {
      AppendEscape(c, /*c1=*/true, &escaped);
      target_->sputn(escaped.data(), static_cast<std::streamsize>(escaped.size()));
      return;
    }
    target_->sputc(static_cast<char>(0xc2));
  }
  if (c == 0xc2) {
    pending_c2_ = true;
  } else if (IsControl(c)) {
    AppendEscape(c, /*c1=*/false, &escaped);
    target_->sputn(escaped.data(), static_cast<std::streamsize>(escaped.size()));
  } else {
    target_->sputc(static_cast<char>(c));
  }
}

EscapingStreambuf::int_type EscapingStreambuf::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  Put(static_cast<unsigned char>(traits_type::to_char_type(c)));
  return c;
}

std::streamsize EscapingStreambuf::xsputn(const char* s, std::streamsize n) {
  std::streamsize i = 0;
  while (i < n) {
    // Runs of plain bytes go through in one call.
    std::streamsize run = i;
    while (!pending_c2_ && run < n) {
      const unsigned char c = static_cast<unsigned char>(s[run]);
      if (c == 0xc2 || IsControl(c)) break;
      ++run;
    }
    if (run > i) {
      target_->sputn(s + i, run - i);
      i = run;
      continue;
    }
    Put(static_cast<unsigned char>(s[i]));
    ++i;
  }
  return n;
}

}  // namespace llamafleet::cli
