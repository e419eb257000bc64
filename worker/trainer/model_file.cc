#include "model_file.h"

#include <fcntl.h>

#include "absl/strings/str_cat.h"
#include "common/safe_open.h"

namespace llamafleet::trainer {

absl::StatusOr<std::string> ReadModelFile(const std::string& path, uint64_t max_bytes) {
  return ReadRegularFile(AT_FDCWD, path, static_cast<size_t>(max_bytes), path, LastLink::kFollow);
}

bool JsonNestsDeeperThan(absl::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

namespace {

// Counts values as nlohmann's SAX parser reports them, stopping the parse past `limit_`.
class ValueCounter final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit ValueCounter(uint64_t limit) : limit_(limit) {}
  bool over() const { return count_ > limit_; }

  bool null() override { return Add(); }
  bool boolean(bool) override { return Add(); }
  bool number_integer(number_integer_t) override { return Add(); }
  bool number_unsigned(number_unsigned_t) override { return Add(); }
  bool number_float(number_float_t, const string_t&) override { return Add(); }
  bool string(string_t&) override { return Add(); }
  bool binary(binary_t&) override { return Add(); }
  bool start_object(std::size_t) override { return Add(); }
  bool key(string_t&) override { return Add(); }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return Add(); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool Add() { return ++count_ <= limit_; }

  const uint64_t limit_;
  uint64_t count_ = 0;
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseBoundedJson(absl::string_view text, int max_depth,
                                                uint64_t max_values) {
  if (JsonNestsDeeperThan(text, max_depth)) {
    return absl::InvalidArgumentError(absl::StrCat("nested deeper than ", max_depth, " levels"));
  }
  // A value takes at least one byte of text, so only a limit below the size needs the pass.
  if (max_values < text.size()) {
    ValueCounter counter(max_values);
    const bool parsed = nlohmann::json::sax_parse(text.begin(), text.end(), &counter,
                                                  nlohmann::json::input_format_t::json,
                                                  /*strict=*/true, /*ignore_comments=*/false);
    if (counter.over()) {
      return absl::InvalidArgumentError(
          absl::StrCat("holds more than ", max_values, " JSON values"));
    }
    if (!parsed) return absl::InvalidArgumentError("not valid JSON");
  }
  nlohmann::json j =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  return j;
}

}  // namespace llamafleet::trainer
