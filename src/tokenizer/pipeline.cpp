// The encode/decode passes over the parsed components.
#include "pipeline.h"

namespace es::tok {

std::vector<Piece> Pipeline::PreTokenized(std::string_view text) const {
  std::vector<Piece> pieces;
  if (text.empty()) return pieces;
  Piece whole;
  whole.text = std::string(text);
  whole.at_start = true;
  pieces.push_back(std::move(whole));
  added.Split(&pieces, /*normalized_trie=*/false);
  if (normalizer) {
    for (auto& p : pieces)
      if (p.added_id < 0) normalizer->Normalize(&p.text);
  }
  added.Split(&pieces, /*normalized_trie=*/true);
  if (pre_tokenizer) pre_tokenizer->PreTokenize(&pieces);
  return pieces;
}

std::vector<int32_t> Pipeline::EncodeNoSpecial(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const auto& p : PreTokenized(text)) {
    if (p.added_id >= 0)
      ids.push_back(p.added_id);
    else
      model->Tokenize(p.text, &ids);
  }
  return ids;
}

const std::string* Pipeline::TokenString(int32_t id) const {
  if (const AddedToken* t = added.ById(id)) return &t->content;
  return model->IdToToken(id);
}

std::string Pipeline::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* t = added.ById(id)) {
      if (skip_special && t->special) continue;
      tokens.push_back(t->content);
    } else if (const std::string* s = model->IdToToken(id)) {
      tokens.push_back(*s);
    }
  }
  if (!decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  decoder->DecodeChain(&tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace es::tok
