// EscapingStreambuf, apart from escape.cc: its vtable brings in std::streambuf and with it
// libstdc++'s locale machinery (wide-character facets, their IFUNC-resolved string
// functions), which the small `llamafleet` front does not link (issue 13: a page fault
// costs ~10-15 us on the VMs this is measured on, and every resolved function touches a
// page at start).
#include "clients/cli/escape.h"

namespace llamafleet::cli {

using escape_internal::AppendEscape;
using escape_internal::IsControl;

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
