#include "pretokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace llamafleet::trainer {

namespace {

// Per match attempt. A token-sized match of a real pattern needs a few hundred steps; a
// catastrophic one reaches these in well under a second.
constexpr uint32_t kMatchLimit = 2'000'000;
constexpr uint32_t kDepthLimit = 10'000;
constexpr uint32_t kHeapLimitKiB = 16 << 10;
constexpr size_t kJitStackBytes = 1 << 20;

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return absl::StrCat("PCRE2 error ", code);
  return reinterpret_cast<const char*>(buf);
}

// One JIT stack and one match block per thread, shared by every pattern.
struct ThreadMatchState {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, kJitStackBytes, nullptr);
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_jit_stack_free(stack);
  }
};

ThreadMatchState& ThreadState() {
  thread_local ThreadMatchState state;
  return state;
}

pcre2_jit_stack* JitStack(void*) { return ThreadState().stack; }

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace

int64_t Utf8Error(absl::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + len > n) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Overlong forms, surrogates, beyond U+10FFFF.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return static_cast<int64_t>(i);
    }
    i += len;
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<PretokenizerRegex>> PretokenizerRegex::Compile(
    absl::string_view pattern) {
  if (pattern.size() > kMaxPretokenizerPatternBytes) {
    return absl::InvalidArgumentError(absl::StrCat("regular expression of ", pattern.size(),
                                                   " bytes; at most ",
                                                   kMaxPretokenizerPatternBytes));
  }
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  pcre2_set_max_pattern_length(cc, kMaxPretokenizerPatternBytes);
  pcre2_set_parens_nest_limit(cc, 64);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &err, &offset, cc);
  pcre2_compile_context_free(cc);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regular expression does not compile at offset ",
                                                   offset, ": ", Pcre2Message(err)));
  }
  std::unique_ptr<PretokenizerRegex> r(new PretokenizerRegex());
  r->code_ = code;
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // the interpreter serves where JIT is absent
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(mc, kMatchLimit);
  pcre2_set_depth_limit(mc, kDepthLimit);
  pcre2_set_heap_limit(mc, kHeapLimitKiB);
  pcre2_jit_stack_assign(mc, JitStack, nullptr);
  r->context_ = mc;
  return r;
}

PretokenizerRegex::~PretokenizerRegex() {
  pcre2_match_context_free(static_cast<pcre2_match_context*>(context_));
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

absl::Status PretokenizerRegex::Split(absl::string_view text,
                                      std::vector<absl::string_view>* pieces) const {
  ThreadMatchState& st = ThreadState();
  const auto* code = static_cast<const pcre2_code*>(code_);
  auto* mc = static_cast<pcre2_match_context*>(context_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, gap = 0;  // next search start; start of text not yet in a piece
  while (pos < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, mc);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("regular expression fails at byte ", pos, ": ", Pcre2Message(rc),
                       " (the pattern backtracks beyond its limits)"));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t start = ov[0], end = ov[1];
    if (end <= start) {  // an empty match: the character there stays in the gap
      if (start >= text.size()) break;
      pos = start + Utf8Length(static_cast<unsigned char>(text[start]));
      continue;
    }
    if (start > gap) pieces->push_back(text.substr(gap, start - gap));
    pieces->push_back(text.substr(start, end - start));
    pos = gap = end;
  }
  if (gap < text.size()) pieces->push_back(text.substr(gap));
  return absl::OkStatus();
}

}  // namespace llamafleet::trainer
