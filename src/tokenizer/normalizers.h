// Normalizers of tokenizer.json ("normalizer"): NFC, NFD, NFKC, NFKD (utf8proc), Lowercase,
// Strip, Replace, Prepend, StripAccents, ByteLevel, Sequence. Each rewrites one piece's text in
// place, as `tokenizers` applies it to each piece between added tokens.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace es::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string* text) const = 0;  // text: valid UTF-8, stays valid
};

// null json -> nullptr. Unknown "type" -> es::Error naming it; `where` names the JSON field.
std::unique_ptr<Normalizer> MakeNormalizer(const nlohmann::json& j, const std::string& where);

// Unicode normalization forms through utf8proc (also used by tests).
enum class UnicodeForm { kNFC, kNFD, kNFKC, kNFKD };
std::string UnicodeNormalize(const std::string& text, UnicodeForm form);

}  // namespace es::tok
