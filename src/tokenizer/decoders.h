// Decoders of tokenizer.json ("decoder"): ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip, BPEDecoder, Sequence — `tokenizers`' decode_chain: a list of token strings in, a list
// out; the final text is their concatenation.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace es::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
  // Whether a token string maps to bytes one character at a time (GPT-2 byte level), so that a
  // single token's bytes are known even when they end inside a UTF-8 character.
  virtual bool byte_level() const { return false; }
};

// null json -> nullptr. Unknown "type" -> es::Error naming it.
std::unique_ptr<Decoder> MakeDecoder(const nlohmann::json& j, const std::string& where);
std::unique_ptr<Decoder> MakeByteLevelDecoder();

}  // namespace es::tok
