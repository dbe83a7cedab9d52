// Grammar constraint for the engine (grammar_constraint.h).
#include "grammar_constraint.h"

#include <algorithm>

#include "edgeseek/internal/core/error.h"

namespace es::server {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const grammar::Grammar> g,
                                     std::shared_ptr<const grammar::TokenTrie> trie,
                                     std::vector<int32_t> stop_ids)
    : matcher_(std::move(g), std::move(trie)), stop_ids_(std::move(stop_ids)) {}

int GrammarConstraint::Apply(float* logits, int vocab) {
  // One rule for both paths: the mask AllowMask sends to the device, applied here to the row.
  const int allowed = AllowMask(vocab, &allow_);
  grammar::ApplyMask(allow_, logits, vocab);
  return allowed;
}

int GrammarConstraint::AllowMask(int vocab, std::vector<uint64_t>* allow) {
  const std::vector<uint64_t>& mask = matcher_.Mask();
  const size_t words = (size_t(vocab) + 63) / 64;
  allow->assign(words, 0);
  std::copy_n(mask.begin(), std::min(words, mask.size()), allow->begin());
  if (vocab % 64 != 0 && words > 0) allow->back() &= (uint64_t(1) << (vocab % 64)) - 1;
  if (matcher_.accepting())
    for (int32_t id : stop_ids_)
      if (id >= 0 && id < vocab) (*allow)[size_t(id) / 64] |= uint64_t(1) << (id % 64);
  int allowed = 0;
  for (uint64_t w : *allow) allowed += __builtin_popcountll(w);
  return allowed;
}

void GrammarConstraint::Accept(int32_t id) {
  if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) return;  // the end
  // Apply allowed only what Matcher accepts, so a refusal is a bug, not bad input.
  ES_CHECK(matcher_.Accept(id), "internal error: the grammar refused token ", id,
           " its mask allowed");
}

}  // namespace es::server
