// Regex (pcre_regex.h): the PCRE2 (JIT) engine behind Split/Replace patterns. `tokenizers` compiles
// these patterns with Oniguruma; both are backtracking, leftmost-first engines, so match results
// agree once \s is given Oniguruma's Unicode White_Space meaning (PCRE2's \s with UCP also takes
// U+180E), which the constructor arranges by rewriting \s outside and inside classes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace es::tok {

class Regex {
 public:
  // Throws es::Error naming `where` (the JSON field) and the PCRE2 error offset when the pattern
  // does not compile.
  Regex(std::string_view pattern, std::string_view where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [start, end) of every match, left to right, not overlapping. As with Oniguruma's
  // find_iter, an empty match right where the previous match ended is skipped. `text` must be
  // valid UTF-8.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;
  static std::string Escape(std::string_view literal);

 private:
  void* code_ = nullptr;  // pcre2_code_8*, owned
  bool jit_ = false;      // JIT-compiled: matched with pcre2_jit_match (no per-call checks)
};

}  // namespace es::tok
