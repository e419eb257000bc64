#ifndef LLAMAFLEET_TESTS_FUZZ_CHAT_FIXTURE_H_
#define LLAMAFLEET_TESTS_FUZZ_CHAT_FIXTURE_H_

// What the chat and preference record harnesses share: the chat fixture's tokenizer and
// the built-in template an input's first byte picks. Define LLAMAFLEET_CHAT_TOKENIZER
// (a tokenizer.json path) before including.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "chat_template.h"
#include "tokenizer.h"

namespace llamafleet::trainer {

// The fixture tokenizer, loaded once; traps when it cannot be loaded (a broken build, not
// an input the harness tests).
inline const Tokenizer& FixtureTokenizer() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(LLAMAFLEET_CHAT_TOKENIZER);
    if (!t.ok()) __builtin_trap();
    return std::move(*t);
  }();
  return *tok;
}

// The built-in renderer named by the low two bits of `selector`.
inline absl::StatusOr<ChatTemplate> FixtureTemplate(uint8_t selector) {
  static const char* const kNames[] = {"llama2", "llama3", "chatml", "mistral"};
  return ChatTemplateByName(kNames[selector & 3]);
}

}  // namespace llamafleet::trainer

#endif  // LLAMAFLEET_TESTS_FUZZ_CHAT_FIXTURE_H_
