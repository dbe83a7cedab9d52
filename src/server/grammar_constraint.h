// The engine's TokenConstraint (sampler.h) for a grammar: a grammar::Matcher over the model's
// token trie, plus the stop ids (EOS, end of turn), which are allowed exactly when the text so
// far is a complete sentence of the grammar. Everything runs on the engine thread.
#pragma once

#include <memory>
#include <vector>

#include "edgeseek/internal/grammar/matcher.h"
#include "edgeseek/internal/runtime/sampler.h"

namespace es::server {

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const grammar::Grammar> g,
                    std::shared_ptr<const grammar::TokenTrie> trie, std::vector<int32_t> stop_ids);
  int Apply(float* logits, int vocab) override;
  int AllowMask(int vocab, std::vector<uint64_t>* allow) override;
  void Accept(int32_t id) override;
  bool complete() const override { return matcher_.accepting(); }

 private:
  grammar::Matcher matcher_;
  std::vector<int32_t> stop_ids_;
  std::vector<uint64_t> allow_;  // Apply's mask (AllowMask's), kept for its capacity
};

}  // namespace es::server
