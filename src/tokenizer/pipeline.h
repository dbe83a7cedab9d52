// Pipeline: the parsed components of one tokenizer.json and the encode/decode passes that chain
// them, in `tokenizers`' order: added tokens on raw text -> normalizer per piece -> normalized
// added tokens -> pre-tokenizer -> BPE model -> post-processor; decode: id -> token string ->
// decoder chain -> concatenation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "added_vocabulary.h"
#include "bpe_model.h"
#include "decoders.h"
#include "normalizers.h"
#include "post_processors.h"
#include "pre_tokenizers.h"

namespace es::tok {

struct Pipeline {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  int32_t vocab_size = 0;  // highest id + 1, added tokens included

  // `text` must be valid UTF-8. No special tokens are added.
  std::vector<int32_t> EncodeNoSpecial(std::string_view text) const;
  // The pieces the model receives (after added tokens, normalizer and pre-tokenizer): tests.
  std::vector<Piece> PreTokenized(std::string_view text) const;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const;
  // The token string decode starts from: an added token's content or the model's vocab string.
  const std::string* TokenString(int32_t id) const;
};

}  // namespace es::tok
