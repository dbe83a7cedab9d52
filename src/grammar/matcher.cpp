// Pushdown matcher and token masks (matcher.h).
#include "edgeseek/internal/grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "edgeseek/internal/core/error.h"

namespace es::grammar {

// Tokens longer than this never take part in a grammar (a hostile tokenizer's huge added token
// would otherwise make the trie as deep as it is long).
static constexpr size_t kMaxTokenBytes = 1024;

// ---- TokenTrie --------------------------------------------------------------------------------

namespace {

// The characters a plain token never holds: control characters, '"' and '\\' (what ends or
// escapes a JSON string). All ASCII, so a multi-byte character is never one.
bool Special(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

// The code points of a plain token (an unfinished last character counted as one): valid UTF-8
// as StepByte reads it — no overlong forms, surrogates or code points past U+10FFFF, and an
// unfinished character only where some character can still complete it — and no Special().
// 0 for any other token.
size_t PlainLength(const std::string& t) {
  size_t n = 0;
  for (size_t i = 0; i < t.size(); ++n) {
    const uint8_t b = uint8_t(t[i]);
    if (b < 0x80) {
      if (Special(b)) return 0;
      ++i;
      continue;
    }
    int need;
    uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
    if (b >= 0xC2 && b <= 0xDF)
      need = 1;
    else if (b >= 0xE0 && b <= 0xEF)
      need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4)
      need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else
      return 0;
    ++i;
    for (int k = 0; k < need; ++k, ++i) {
      if (i == t.size()) return n + 1;  // unfinished, and completable: the checks so far passed
      const uint8_t c = uint8_t(t[i]);
      if (k == 0 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) return 0;
    }
  }
  return n;
}

}  // namespace

TokenTrie::TokenTrie(std::vector<std::string> bytes) : bytes_(std::move(bytes)) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty() && bytes_[i].size() <= kMaxTokenBytes) order.push_back(int32_t(i));
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
  // Sorted strings give the preorder directly: keep the path of the previous token, pop to the
  // common prefix, push the rest. The ids of a node are contiguous (equal strings are adjacent).
  byte_.push_back(0);
  depth_.push_back(0);
  end_.push_back(0);
  tok_begin_.push_back(0);
  std::vector<uint32_t> path{0};  // path[d] = node at depth d
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& t = bytes_[size_t(id)];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < t.size() && (*prev)[common] == t[common]) ++common;
    while (path.size() > common + 1) {
      end_[path.back()] = uint32_t(byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < t.size(); ++d) {
      byte_.push_back(uint8_t(t[d]));
      depth_.push_back(uint16_t(d + 1));
      end_.push_back(0);
      tok_begin_.push_back(uint32_t(ids_.size()));
      path.push_back(uint32_t(byte_.size() - 1));
    }
    ids_.push_back(id);
    max_depth_ = std::max(max_depth_, int(t.size()));
    prev = &t;
  }
  while (!path.empty()) {
    end_[path.back()] = uint32_t(byte_.size());
    path.pop_back();
  }
  tok_begin_.push_back(uint32_t(ids_.size()));

  // ---- plain tokens ----
  plain_len_.assign(bytes_.size(), 0);
  for (int32_t id : ids_)
    plain_len_[size_t(id)] = uint16_t(std::min<size_t>(PlainLength(bytes_[size_t(id)]), 65535));
  std::vector<uint32_t> count;
  for (int32_t id : ids_) {
    const uint16_t l = plain_len_[size_t(id)];
    if (!l) continue;
    if (count.size() <= l) count.resize(size_t(l) + 1, 0);
    ++count[l];
  }
  plain_upto_.assign(count.size(), 0);
  for (size_t l = 1; l < count.size(); ++l) plain_upto_[l] = plain_upto_[l - 1] + count[l];
  plain_ids_.assign(plain_upto_.empty() ? 0 : plain_upto_.back(), 0);
  std::vector<uint32_t> fill(plain_upto_.size(), 0);
  for (size_t l = 1; l < fill.size(); ++l) fill[l] = plain_upto_[l - 1];
  plain_all_.assign((bytes_.size() + 63) / 64, 0);
  for (int32_t id : ids_) {
    const uint16_t l = plain_len_[size_t(id)];
    if (!l) continue;
    plain_ids_[fill[l]++] = id;
    plain_all_[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
  }
  // A node's subtree holds the ids ids_[tok_begin_[n] .. tok_begin_[end_[n]]) (preorder).
  std::vector<uint32_t> special(ids_.size() + 1, 0);
  for (size_t k = 0; k < ids_.size(); ++k)
    special[k + 1] = special[k] + (plain_len_[size_t(ids_[k])] == 0);
  special_below_.assign(byte_.size(), 0);
  for (size_t n = 0; n < byte_.size(); ++n)
    special_below_[n] = special[tok_begin_[end_[n]]] > special[tok_begin_[n]];
}

// ---- Matcher: automaton ----------------------------------------------------------------------

Matcher::Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie,
                 const MatcherLimits& lim)
    : g_(std::move(g)), trie_(std::move(trie)), lim_(lim) {
  const auto& rules = g_->rules();
  alts_.resize(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (const auto& alt : rules[r].alternatives) {
      alts_[r].push_back(int32_t(code_.size()));
      for (const auto& e : alt) {
        if (e.kind == Element::Kind::kRule) {
          code_.push_back({Code::kRule, e.rule});
          continue;
        }
        Class c{e};
        for (uint32_t cp = 0; cp < 128; ++cp)
          if (e.Matches(cp)) c.ascii[cp >> 6] |= uint64_t(1) << (cp & 63);
        classes_.push_back(std::move(c));
        code_.push_back({Code::kChars, int32_t(classes_.size() - 1)});
      }
      code_.push_back({Code::kEnd, 0});
    }
  nodes_.push_back({-1, -1});  // 0: the empty stack
  ++epoch_;
  std::vector<int32_t> start;
  for (int32_t s : alts_[size_t(g_->root())]) Expand(Normalize(s, 0), &start);
  ES_ASSERT(!start.empty());  // Grammar::Finish proved the root productive
  std::sort(start.begin(), start.end());
  cur_ = {InternState(std::move(start)), 0, 0, 0};
}

int32_t Matcher::Intern(int32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  auto it = node_ids_.find(key);
  if (it != node_ids_.end()) return it->second;
  ES_CHECK(nodes_.size() < lim_.max_stacks, "grammar: the matcher outgrew its limit of ",
           lim_.max_stacks, " stack nodes");
  nodes_.push_back({pos, parent});
  node_ids_.emplace(key, int32_t(nodes_.size() - 1));
  return int32_t(nodes_.size() - 1);
}

// The stack "at pos, then parent"; at the end of an alternative that is the parent itself (a
// tail call: right recursion such as x* does not grow the stack).
int32_t Matcher::Normalize(int32_t pos, int32_t parent) {
  return code_[size_t(pos)].kind == Code::kEnd ? parent : Intern(pos, parent);
}

// Closure of one stack: rule references are entered until each stack's top is a character class
// (or the stack is empty). Iterative, with per-step visited marks, so it ends on any grammar
// without left recursion.
void Matcher::Expand(int32_t node, std::vector<int32_t>* out) {
  std::vector<int32_t> work{node};
  while (!work.empty()) {
    const int32_t n = work.back();
    work.pop_back();
    if (seen_.size() < nodes_.size()) seen_.resize(nodes_.size() * 2, 0);
    if (seen_[size_t(n)] == epoch_) continue;
    seen_[size_t(n)] = epoch_;
    if (n == 0) {
      out->push_back(0);
      continue;
    }
    const auto [pos, parent] = nodes_[size_t(n)];
    const Code c = code_[size_t(pos)];
    if (c.kind == Code::kChars) {
      out->push_back(n);
      ES_CHECK(out->size() <= lim_.max_state_stacks, "grammar: more than ", lim_.max_state_stacks,
               " parses are open at once (the grammar is too ambiguous)");
      continue;
    }
    const int32_t cont = Normalize(pos + 1, parent);
    for (int32_t s : alts_[size_t(c.arg)]) work.push_back(Normalize(s, cont));
  }
}

int32_t Matcher::InternState(std::vector<int32_t> stacks) {
  std::string key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(int32_t));
  auto it = state_ids_.find(key);
  if (it != state_ids_.end()) return it->second;
  ES_CHECK(states_.size() < lim_.max_states, "grammar: the matcher outgrew its limit of ",
           lim_.max_states, " states");
  State s;
  s.accepting = !stacks.empty() && stacks[0] == 0;
  s.stacks = std::move(stacks);
  s.ascii.assign(128, -2);
  states_.push_back(std::move(s));
  state_ids_.emplace(std::move(key), int32_t(states_.size() - 1));
  return int32_t(states_.size() - 1);
}

int32_t Matcher::Step(int32_t st, uint32_t cp) {
  ++epoch_;
  std::vector<int32_t> out;
  const std::vector<int32_t> stacks = states_[size_t(st)].stacks;
  for (int32_t n : stacks) {
    if (n == 0) continue;
    const auto [pos, parent] = nodes_[size_t(n)];
    const Class& c = classes_[size_t(code_[size_t(pos)].arg)];
    const bool match = cp < 128 ? (c.ascii[cp >> 6] >> (cp & 63)) & 1 : c.e.Matches(cp);
    if (match) Expand(Normalize(pos + 1, parent), &out);
  }
  if (out.empty()) return -1;
  std::sort(out.begin(), out.end());
  return InternState(std::move(out));
}

int32_t Matcher::Next(int32_t st, uint32_t cp) {
  if (cp < 128) {
    int32_t n = states_[size_t(st)].ascii[cp];
    if (n == -2) {
      n = Step(st, cp);
      states_[size_t(st)].ascii[cp] = n;
    }
    return n;
  }
  auto& other = states_[size_t(st)].other;
  auto it = other.find(cp);
  if (it != other.end()) return it->second;
  const int32_t n = Step(st, cp);
  states_[size_t(st)].other.emplace(cp, n);
  return n;
}

// ---- Matcher: bytes and masks ----------------------------------------------------------------

Matcher::Walk Matcher::StepByte(Walk w, uint8_t b) {
  if (w.need == 0) {
    if (b < 0x80) return {Next(w.st, b), 0, 0, 0};
    // Lead bytes; C0/C1 (overlong) and F5..FF are never valid UTF-8.
    if (b >= 0xC2 && b <= 0xDF) return {w.st, uint32_t(b & 0x1F), 1, 0x80};
    if (b >= 0xE0 && b <= 0xEF) return {w.st, uint32_t(b & 0x0F), 2, 0x800};
    if (b >= 0xF0 && b <= 0xF4) return {w.st, uint32_t(b & 0x07), 3, 0x10000};
    return {-1, 0, 0, 0};
  }
  if ((b & 0xC0) != 0x80) return {-1, 0, 0, 0};
  const uint32_t cp = (w.partial << 6) | (b & 0x3F);
  if (w.need > 1) return {w.st, cp, w.need - 1, w.min};
  // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
  if (cp < w.min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return {-1, 0, 0, 0};
  return {Next(w.st, cp), 0, 0, 0};
}

// Some character the state allows begins with the bytes read so far.
bool Matcher::PartialOk(const Walk& w) const {
  const int shift = 6 * w.need;
  const uint32_t hi = (w.partial << shift) | ((uint32_t(1) << shift) - 1);
  const uint32_t lo = std::max(w.partial << shift, w.min);
  if (lo > hi || lo > 0x10FFFF) return false;
  if (lo >= 0xD800 && hi <= 0xDFFF) return false;  // ED A0..BF: only surrogates, never UTF-8
  for (int32_t n : states_[size_t(w.st)].stacks) {
    if (n == 0) continue;
    const Element& e = classes_[size_t(code_[size_t(nodes_[size_t(n)].first)].arg)].e;
    if (e.negated) {
      bool covered = false;
      for (const auto& [a, b] : e.ranges) covered = covered || (a <= lo && b >= hi);
      if (!covered) return true;
    } else {
      for (const auto& [a, b] : e.ranges)
        if (a <= hi && b >= lo) return true;
    }
  }
  return false;
}

int32_t Matcher::PlainRun(int32_t st) {
  const TokenTrie& t = *trie_;
  const int32_t longest = int32_t(t.plain_upto_.empty() ? 0 : t.plain_upto_.size() - 1);
  auto alike = [&](int32_t s) {  // every stack's class holds all plain characters or none
    for (int32_t n : states_[size_t(s)].stacks) {
      if (n == 0) continue;
      const Element& e = classes_[size_t(code_[size_t(nodes_[size_t(n)].first)].arg)].e;
      for (const auto& [a, b] : e.ranges)
        for (uint32_t cp = a; cp <= b; ++cp)
          if (!Special(cp)) return false;  // (ranges of specials are short: at most 0x00-0x5C)
    }
    return true;
  };
  int32_t k = 0;
  for (int32_t s = st; k <= longest; ++k) {
    if (!alike(s)) return -1;
    const int32_t next = Next(s, 'a');  // any plain character steps as 'a' does
    if (next < 0) return k;
    if (next == s) return std::numeric_limits<int32_t>::max();
    s = next;
  }
  return std::numeric_limits<int32_t>::max();  // longer than any plain token
}

void Matcher::Compute(const Walk& from, std::vector<uint64_t>* mask) {
  const int32_t run = from.need == 0 ? PlainRun(from.st) : -1;
  if (run < 0) return ComputeByWalk(from, /*special_only=*/false, mask);
  const TokenTrie& t = *trie_;
  // The plain tokens of at most `run` characters, then the walk to the others.
  if (run >= int32_t(t.plain_upto_.size()) - 1) {
    *mask = t.plain_all_;
  } else {
    mask->assign(t.plain_all_.size(), 0);
    for (uint32_t k = 0; k < t.plain_upto_[size_t(run)]; ++k) {
      const int32_t id = t.plain_ids_[k];
      (*mask)[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
    }
  }
  ComputeByWalk(from, /*special_only=*/true, mask);
}

std::vector<uint64_t> Matcher::MaskByWalk() {
  std::vector<uint64_t> mask;
  ComputeByWalk(cur_, /*special_only=*/false, &mask);
  return mask;
}

// The walk of the trie from `from`, ORed into *mask (cleared first unless special_only, which
// walks only the subtrees holding non-plain tokens).
void Matcher::ComputeByWalk(const Walk& from, bool special_only, std::vector<uint64_t>* mask) {
  const TokenTrie& t = *trie_;
  if (!special_only) mask->assign(size_t(t.vocab_size() + 63) / 64, 0);
  std::vector<Walk> at(size_t(t.max_depth_) + 1);
  at[0] = from;
  const uint32_t n = uint32_t(t.byte_.size());
  for (uint32_t i = 1; i < n;) {
    if (special_only && !t.special_below_[i]) {
      i = t.end_[i];
      continue;
    }
    const Walk w = StepByte(at[t.depth_[i] - 1u], t.byte_[i]);
    if (w.st < 0 || (w.need > 0 && !PartialOk(w))) {
      i = t.end_[i];  // nothing under this prefix can be allowed
      continue;
    }
    at[t.depth_[i]] = w;
    for (uint32_t k = t.tok_begin_[i]; k < t.tok_begin_[i + 1]; ++k) {
      const int32_t id = t.ids_[k];
      (*mask)[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
    }
    ++i;
  }
}

const std::vector<uint64_t>& Matcher::Mask() {
  if (cur_.need > 0) {  // inside a character: rare, not cached
    Compute(cur_, &scratch_mask_);
    return scratch_mask_;
  }
  int32_t m = states_[size_t(cur_.st)].mask;
  if (m >= 0) return masks_[size_t(m)];
  if (masks_.size() >= lim_.max_cached_masks) {
    masks_.clear();
    for (auto& s : states_) s.mask = -1;
  }
  masks_.emplace_back();
  Compute(cur_, &masks_.back());
  m = int32_t(masks_.size() - 1);
  states_[size_t(cur_.st)].mask = m;
  return masks_[size_t(m)];
}

bool Matcher::AcceptBytes(std::string_view bytes) {
  Walk w = cur_;
  for (char c : bytes) {
    w = StepByte(w, uint8_t(c));
    if (w.st < 0 || (w.need > 0 && !PartialOk(w))) return false;
  }
  cur_ = w;
  return true;
}

bool Matcher::Accept(int32_t id) {
  if (id < 0 || id >= trie_->vocab_size()) return false;
  const std::string& b = trie_->bytes(id);
  if (b.empty() || b.size() > kMaxTokenBytes) return false;
  return AcceptBytes(b);
}

bool Matcher::AcceptText(std::string_view text) { return AcceptBytes(text); }

bool Matcher::accepting() const { return cur_.need == 0 && states_[size_t(cur_.st)].accepting; }

bool Matcher::can_continue() const {
  if (cur_.need > 0) return true;
  const auto& s = states_[size_t(cur_.st)].stacks;
  return !s.empty() && s.back() != 0;
}

int ApplyMask(const std::vector<uint64_t>& mask, float* logits, int vocab) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int allowed = 0;
  for (int w = 0; w * 64 < vocab; ++w) {
    const uint64_t bits = size_t(w) < mask.size() ? mask[size_t(w)] : 0;
    const int n = std::min(64, vocab - w * 64);
    float* l = logits + w * 64;
    if (n == 64) {
      // Per word, touch only the minority: a typical JSON mask is either a few allowed ids in
      // a word (before a key: fill with -inf, put the few back) or a few cleared ones (inside
      // a string: the tokens holding '"' or '\\' are spread over the whole vocabulary).
      const int on = __builtin_popcountll(bits);
      allowed += on;
      if (on == 64) continue;
      if (on <= 32) {
        float keep[32];
        int idx[32], m = 0;
        for (uint64_t b = bits; b; b &= b - 1) {
          idx[m] = __builtin_ctzll(b);
          keep[m] = l[idx[m]];
          ++m;
        }
        std::fill(l, l + 64, kNegInf);
        for (int k = 0; k < m; ++k) l[idx[k]] = keep[k];
      } else {
        for (uint64_t b = ~bits; b; b &= b - 1) l[__builtin_ctzll(b)] = kNegInf;
      }
      continue;
    }
    for (int k = 0; k < n; ++k) {
      const bool on = (bits >> k) & 1;
      allowed += on;
      if (!on) l[k] = kNegInf;
    }
  }
  return allowed;
}

}  // namespace es::grammar
