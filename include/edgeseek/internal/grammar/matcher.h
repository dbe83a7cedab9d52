// Constrained decoding: a Grammar (grammar.h) run as a pushdown automaton over code points, and
// the per-step mask of the token ids that may come next.
//
// TokenTrie indexes a vocabulary's token byte strings once per tokenizer (shared by every
// request). Matcher holds one request's position in the grammar. Its state is a set of stacks
// (the grammar may be ambiguous); stacks are interned as linked (position, parent) nodes and
// states as sorted stack sets, so that a step from a state on a code point is computed once and
// then looked up (dense for ASCII). The mask of a state is one walk of the trie in preorder:
// each trie node steps its parent's state by one byte (UTF-8 is decoded along the way, and a
// token may end inside a character when some allowed character starts with those bytes); a dead
// state skips the whole subtree. Masks are cached per state, so a state met again — the common
// case in JSON, where "inside a string of this object" recurs at every character — costs a hash
// lookup. docs/server.md has the measured costs.
//
// The first visit to a state inside a JSON string would walk nearly the whole trie (every token
// fits). The trie therefore also sorts tokens into "plain" ones — valid UTF-8 (a last character
// possibly unfinished) without '"', '\\' or control characters — and the rest. When every stack
// of a state treats all plain characters alike (a class that holds all of them or none: a string's
// [^"\\\x00-\x1F], its '"' and '\\'), they all step to one next state; following that chain gives
// how many plain characters may come (unbounded for char*, N for char{0,N}), so the plain tokens
// are allowed by their length at once, and only the paths to the other tokens are walked.
// States where that does not hold take the whole walk (MaskByWalk, also the tests' reference).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "edgeseek/internal/grammar/grammar.h"

namespace es::grammar {

class TokenTrie {
 public:
  // bytes[id]: the token's bytes; empty for ids a grammar never produces (special tokens,
  // unused ids), which no mask allows.
  explicit TokenTrie(std::vector<std::string> bytes);
  int vocab_size() const { return int(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }

 private:
  friend class Matcher;
  std::vector<std::string> bytes_;
  // Preorder nodes; node 0 is the root (no byte).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<uint32_t> end_;        // one past the node's subtree
  std::vector<uint32_t> tok_begin_;  // ids ending at node n: ids_[tok_begin_[n] .. tok_begin_[n+1])
  std::vector<int32_t> ids_;
  int max_depth_ = 0;
  // Plain tokens (see above): plain_len_[id] code points (an unfinished last one counted), 0 for
  // the others; plain_ids_ sorted by that length, plain_upto_[L] of them of length <= L;
  // plain_all_ their bits; special_below_[n]: some non-plain token ends in node n's subtree.
  std::vector<uint16_t> plain_len_;
  std::vector<int32_t> plain_ids_;
  std::vector<uint32_t> plain_upto_;
  std::vector<uint64_t> plain_all_;
  std::vector<uint8_t> special_below_;
};

// Bounds on one matcher's tables: outside input picks the grammar, so its automaton is capped.
struct MatcherLimits {
  size_t max_stacks = 1 << 20;  // interned stack nodes
  size_t max_states = 1 << 18;
  size_t max_state_stacks = 4096;  // stacks in one state (ambiguity)
  size_t max_cached_masks = 512;   // vocab/8 bytes each
};

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie,
          const MatcherLimits& lim = {});
  // One bit per token id (bit id % 64 of word id / 64): set when the token may come next.
  // Throws es::Error when the automaton outgrows its limits.
  const std::vector<uint64_t>& Mask();
  // Advances over a token; false (state unchanged) when the grammar does not allow it.
  bool Accept(int32_t id);
  // Advances over raw text (tests, prefilled output); false (state unchanged) if not allowed.
  bool AcceptText(std::string_view text);
  // The text so far is a complete sentence of the grammar.
  bool accepting() const;
  // Some character may still follow.
  bool can_continue() const;
  // The mask by a walk of the whole trie, with no use of plain tokens: the plain reference of
  // Mask() (tests).
  std::vector<uint64_t> MaskByWalk();
  // Number of states built so far (tests, bench).
  size_t n_states() const { return states_.size(); }

 private:
  struct Code {  // a flattened grammar element
    enum Kind : uint8_t { kChars, kRule, kEnd } kind;
    int32_t arg;  // kChars: class index; kRule: rule
  };
  struct Class {
    Element e;
    uint64_t ascii[2] = {0, 0};
  };
  struct State {
    std::vector<int32_t> stacks;  // sorted stack node ids; 0 is the empty stack (accept)
    std::vector<int32_t> ascii;   // next state on code point < 128; -2 unknown, -1 dead
    std::unordered_map<uint32_t, int32_t> other;
    int32_t mask = -1;  // index into masks_
    bool accepting = false;
  };
  struct Walk {  // a state plus a partly read UTF-8 character
    int32_t st;
    uint32_t partial;
    int32_t need;  // continuation bytes still to come
    uint32_t min;  // smallest code point of this length (shorter forms are overlong)
  };

  int32_t Intern(int32_t pos, int32_t parent);
  int32_t Normalize(int32_t pos, int32_t parent);
  void Expand(int32_t node, std::vector<int32_t>* out);
  int32_t InternState(std::vector<int32_t> stacks);
  int32_t Next(int32_t st, uint32_t cp);
  int32_t Step(int32_t st, uint32_t cp);
  Walk StepByte(Walk w, uint8_t b);
  bool PartialOk(const Walk& w) const;
  void Compute(const Walk& from, std::vector<uint64_t>* mask);
  void ComputeByWalk(const Walk& from, bool special_only, std::vector<uint64_t>* mask);
  // How many plain characters may follow state st (see above): -1 when its stacks do not treat
  // them alike, INT32_MAX when unbounded.
  int32_t PlainRun(int32_t st);
  bool AcceptBytes(std::string_view bytes);

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenTrie> trie_;
  MatcherLimits lim_;
  std::vector<Code> code_;
  std::vector<std::vector<int32_t>> alts_;  // per rule: start positions in code_
  std::vector<Class> classes_;
  std::vector<std::pair<int32_t, int32_t>> nodes_;  // stack nodes: (position, parent)
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> state_ids_;  // key: the stacks' bytes
  std::vector<std::vector<uint64_t>> masks_;
  std::vector<uint64_t> scratch_mask_;
  std::vector<int32_t> seen_;  // Expand's visited marks (epoch per node)
  int32_t epoch_ = 0;
  Walk cur_;
};

// Sets logits[id] = -inf for every id < vocab whose bit is clear (ids past the mask's tokens too).
// Returns how many ids stay allowed.
int ApplyMask(const std::vector<uint64_t>& mask, float* logits, int vocab);

}  // namespace es::grammar
