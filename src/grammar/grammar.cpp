// Grammar IR checks (grammar.h): productive rules, pruning, left recursion.
#include "edgeseek/internal/grammar/grammar.h"

#include "edgeseek/internal/core/error.h"

namespace es::grammar {

bool Element::Matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
  return in != negated;
}

size_t Grammar::n_elements() const {
  size_t n = 0;
  for (const auto& r : rules_)
    for (const auto& a : r.alternatives) n += a.size();
  return n;
}

namespace {

bool ClassEmpty(const Element& e) { return !e.negated && e.ranges.empty(); }

// Rules that derive at least one finite string (least fixpoint).
std::vector<bool> Productive(const std::vector<Rule>& rules) {
  std::vector<bool> prod(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (prod[r]) continue;
      for (const auto& alt : rules[r].alternatives) {
        bool ok = true;
        for (const auto& e : alt)
          ok =
              ok && (e.kind == Element::Kind::kChars ? !ClassEmpty(e) : bool(prod[size_t(e.rule)]));
        if (ok) {
          prod[r] = changed = true;
          break;
        }
      }
    }
  }
  return prod;
}

std::vector<bool> Nullable(const std::vector<Rule>& rules) {
  std::vector<bool> null(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (null[r]) continue;
      for (const auto& alt : rules[r].alternatives) {
        bool ok = true;
        for (const auto& e : alt) ok = ok && e.kind == Element::Kind::kRule && null[size_t(e.rule)];
        if (ok) {
          null[r] = changed = true;
          break;
        }
      }
    }
  }
  return null;
}

}  // namespace

void Grammar::Finish(const std::string& root, const GrammarLimits& lim) {
  ES_CHECK(rules_.size() <= lim.max_rules, "grammar: more than ", lim.max_rules, " rules");
  for (size_t r = 0; r < rules_.size() && root_ < 0; ++r)
    if (rules_[r].name == root) root_ = int(r);
  ES_CHECK(root_ >= 0, "grammar: no rule named '", root, "' (the start rule)");
  // An alternative that uses a rule deriving no finite string can never be completed: drop it,
  // so that every prefix the matcher allows can still be finished.
  const std::vector<bool> prod = Productive(rules_);
  ES_CHECK(prod[size_t(root_)], "grammar: rule '", root,
           "' can never be satisfied (it derives no finite string)");
  for (size_t r = 0; r < rules_.size(); ++r) {
    auto& alts = rules_[r].alternatives;
    std::vector<Sequence> kept;
    for (auto& alt : alts) {
      bool ok = true;
      for (const auto& e : alt)
        ok = ok && (e.kind == Element::Kind::kChars ? !ClassEmpty(e) : bool(prod[size_t(e.rule)]));
      if (ok) kept.push_back(std::move(alt));
    }
    alts = std::move(kept);
  }
  // Left recursion: a rule reachable from itself through leading elements (past nullable ones).
  const std::vector<bool> null = Nullable(rules_);
  std::vector<std::vector<int>> first(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r)
    for (const auto& alt : rules_[r].alternatives)
      for (const auto& e : alt) {
        if (e.kind != Element::Kind::kRule) break;
        first[r].push_back(e.rule);
        if (!null[size_t(e.rule)]) break;
      }
  std::vector<uint8_t> mark(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
  for (size_t start = 0; start < rules_.size(); ++start) {
    if (mark[start]) continue;
    std::vector<std::pair<int, size_t>> path{{int(start), 0}};  // iterative DFS: no recursion
    mark[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == first[size_t(r)].size()) {
        mark[size_t(r)] = 2;
        path.pop_back();
        continue;
      }
      const int s = first[size_t(r)][next++];
      ES_CHECK(
          mark[size_t(s)] != 1, "grammar: rule '", rules_[size_t(s)].name,
          "' is left-recursive (it can start with itself), which this matcher does not support");
      if (mark[size_t(s)] == 0) {
        mark[size_t(s)] = 1;
        path.push_back({s, 0});
      }
    }
  }
}

}  // namespace es::grammar
