// Shared by the grammar tests: vocabularies and a random walk under a grammar's masks.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "edgeseek/internal/grammar/matcher.h"

namespace es::grammar::test {

// A small byte-level-like vocabulary: all 256 single bytes, JSON punctuation runs, words, and
// multi-byte UTF-8 pieces split across tokens (so tokens end inside characters). Id 0 is left
// empty (a "special" token no grammar produces).
std::shared_ptr<const TokenTrie> SmallVocab();
// The Qwen3 tokenizer's bytes, padded with empty ids to 151,936 (Qwen2.5/3 models' vocab);
// null when the test data is not fetched (scripts/fetch_test_data.sh).
std::shared_ptr<const TokenTrie> QwenVocab();
// Samples tokens uniformly among those the mask allows (an adversarial "model"), stopping when
// the grammar accepts and a coin says stop, or when nothing may follow. Returns the text; sets
// *complete when it ended accepting.
std::string RandomWalk(Matcher m, const TokenTrie& vocab, uint64_t seed, int max_tokens,
                       bool* complete);

}  // namespace es::grammar::test
