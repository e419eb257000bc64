#include "tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "hf_bpe_tokenizer.h"
#include "model_file.h"
#include "sentencepiece_tokenizer.h"
#include "tiktoken_tokenizer.h"
#include "util.h"

namespace llamafleet::trainer {

void Tokenizer::SetStopIds(std::vector<int32_t> more) {
  if (eos_ >= 0) more.push_back(eos_);
  std::sort(more.begin(), more.end());
  more.erase(std::unique(more.begin(), more.end()), more.end());
  stop_ids_ = std::move(more);
}

void Tokenizer::SetTemplateTokens(std::vector<std::pair<std::string, int32_t>> tokens) {
  std::sort(tokens.begin(), tokens.end(), [](const auto& a, const auto& b) {
    return a.first.size() != b.first.size() ? a.first.size() > b.first.size() : a.second < b.second;
  });
  template_tokens_ = std::move(tokens);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromBytes(const std::string& path,
                                                                const std::string& bytes,
                                                                const std::string& dir) {
  size_t i = bytes.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // a UTF-8 byte-order mark
  while (i < bytes.size() &&
         (bytes[i] == ' ' || bytes[i] == '\n' || bytes[i] == '\r' || bytes[i] == '\t'))
    ++i;
  if (i < bytes.size() && bytes[i] == '{') return LoadHfBpeTokenizer(path, bytes, dir);
  if (LooksLikeTiktoken(bytes)) return LoadTiktokenTokenizer(path, bytes);
  auto spm = SentencePieceTokenizer::FromBytes(path, bytes);
  if (spm.ok() || absl::IsFailedPrecondition(spm.status())) return spm;
  return absl::InvalidArgumentError(absl::StrCat(
      path,
      ": not a tokenizer: expected a tokenizer.json (JSON whose model.type is \"BPE\"), a tiktoken "
      "ranks file (lines of \"base64-token rank\") or a SentencePiece model (",
      spm.status().message(), ")"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  std::string file = path;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    // tokenizer.model first: Llama 2's and Mistral's directories hold a SentencePiece
    // tokenizer.model beside a tokenizer.json this trainer does not read.
    file = path + "/tokenizer.model";
    if (::stat(file.c_str(), &st) != 0) file = path + "/tokenizer.json";
    if (::stat(file.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat(path, " has no tokenizer.model or tokenizer.json"));
    }
  }
  // Read once, bounded, and loaded from these bytes: the digest names what was loaded.
  LF_ASSIGN_OR_RETURN(const std::string bytes, ReadModelFile(file, kMaxTokenizerFileBytes));
  const size_t slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash);
  return FromBytes(file, bytes, dir);
}

absl::StatusOr<std::map<std::string, std::string>> Tokenizer::ExportFiles() const {
  std::map<std::string, std::string> files;
  if (kind() != "tokenizer.json") {
    LF_ASSIGN_OR_RETURN(files["tokenizer.model"], ReadModelFile(path_, kMaxTokenizerFileBytes));
    return files;
  }
  LF_ASSIGN_OR_RETURN(files["tokenizer.json"], ReadModelFile(path_, kMaxTokenizerFileBytes));
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  for (const char* name : {"tokenizer_config.json", "generation_config.json", "special_tokens_map.json"}) {
    absl::StatusOr<std::string> bytes = ReadModelFile((dir / name).string(), kMaxListingFileBytes);
    if (bytes.ok()) {
      files[name] = *std::move(bytes);
    } else if (!absl::IsNotFound(bytes.status())) {
      return bytes.status();
    }
  }
  return files;
}

}  // namespace llamafleet::trainer
