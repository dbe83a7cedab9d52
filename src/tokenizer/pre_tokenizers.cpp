// Pre-tokenizer implementations and their JSON factory.
#include "pre_tokenizers.h"

#include <nlohmann/json.hpp>

#include "byte_level.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "pcre_regex.h"
#include "utf8.h"

namespace es::tok {

using nlohmann::json;

void PreTokenizer::PreTokenize(std::vector<Piece>* pieces) const {
  std::vector<Piece> out;
  out.reserve(pieces->size() * 4);
  for (auto& p : *pieces) {
    if (p.added_id >= 0)
      out.push_back(std::move(p));
    else
      SplitOne(std::move(p), &out);
  }
  pieces->swap(out);
}

namespace {

constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits at characters for which `pred` holds; each such character is one match.
template <class Pred>
std::vector<MatchSpan> CharMatches(const std::string& s, Pred pred) {
  std::vector<std::pair<size_t, size_t>> m;
  size_t i = 0;
  while (i < s.size()) {
    const size_t b = i;
    if (pred(NextCodePoint(s, &i))) m.emplace_back(b, i);
  }
  return CoverWithMatches(s.size(), m);
}

class SplitPre : public PreTokenizer {
 public:
  SplitPre(const json& j, const std::string& where) {
    regex_ = std::make_unique<Regex>(ReadPattern(j, where), where);
    behavior_ = ParseSplitBehavior(j, where);
    invert_ = json_field::Opt<bool>(j, "invert", false, where);
  }
  SplitPre(const std::string& regex, SplitBehavior b)
      : regex_(std::make_unique<Regex>(regex, "pre_split_regex")), behavior_(b) {}
  void SplitOne(Piece&& p, std::vector<Piece>* out) const override {
    std::vector<std::pair<size_t, size_t>> m;
    regex_->FindAll(p.text, &m);
    auto spans = CoverWithMatches(p.text.size(), m);
    if (invert_)
      for (auto& s : spans) s.is_match = !s.is_match;
    SplitPiece(p, std::move(spans), behavior_, out);
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_ = SplitBehavior::kIsolated;
  bool invert_ = false;
};

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2Regex, "ByteLevel") : nullptr) {}
  void SplitOne(Piece&& p, std::vector<Piece>* out) const override {
    if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
    if (p.text.empty()) return;
    if (!regex_) {
      p.text = BytesToUnicode(p.text);
      out->push_back(std::move(p));
      return;
    }
    // Isolated split on GPT-2's regex, each part mapped to byte characters in one pass.
    thread_local std::vector<std::pair<size_t, size_t>> m;
    m.clear();
    regex_->FindAll(p.text, &m);
    const std::string_view t = p.text;
    auto emit = [&](size_t b, size_t e) {
      Piece q;
      q.text.reserve((e - b) * 2);
      AppendBytesToUnicode(t.substr(b, e - b), &q.text);
      q.at_start = p.at_start && b == 0;
      out->push_back(std::move(q));
    };
    size_t prev = 0;
    for (const auto& [b, e] : m) {
      if (b > prev) emit(prev, b);
      if (e > b) emit(b, e);
      prev = e;
    }
    if (prev < t.size()) emit(prev, t.size());
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class DigitsPre : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual) : individual_(individual) {}
  void SplitOne(Piece&& p, std::vector<Piece>* out) const override {
    SplitPiece(p, CharMatches(p.text, IsNumeric),
               individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, out);
  }

 private:
  bool individual_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(uint32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    AppendUtf8(&rep_, replacement);
  }
  void SplitOne(Piece&& p, std::vector<Piece>* out) const override {
    std::string t;
    t.reserve(p.text.size() + 3);
    for (const char c : p.text) {
      if (c == ' ')
        t += rep_;
      else
        t.push_back(c);
    }
    const bool starts = t.compare(0, rep_.size(), rep_) == 0;
    if (!starts &&
        (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start)))
      t.insert(0, rep_);
    p.text = std::move(t);
    if (!split_) {
      if (!p.text.empty()) out->push_back(std::move(p));
      return;
    }
    const uint32_t r = replacement_;
    SplitPiece(p, CharMatches(p.text, [r](uint32_t c) { return c == r; }),
               SplitBehavior::kMergedWithNext, out);
  }

 private:
  uint32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class WhitespacePre : public PreTokenizer {  // \w+|[^\w\s]+
 public:
  void SplitOne(Piece&& p, std::vector<Piece>* out) const override {
    std::vector<std::pair<size_t, size_t>> m;
    size_t i = 0;
    const std::string& s = p.text;
    int run = 0;  // 1: word run, 2: other run
    size_t run_start = 0;
    while (i < s.size()) {
      const size_t b = i;
      const uint32_t cp = NextCodePoint(s, &i);
      const int kind = IsWordChar(cp) ? 1 : IsWhitespace(cp) ? 0 : 2;
      if (kind != run) {
        if (run) m.emplace_back(run_start, b);
        run = kind;
        run_start = b;
      }
    }
    if (run) m.emplace_back(run_start, s.size());
    auto spans = CoverWithMatches(s.size(), m);
    for (auto& sp : spans) sp.is_match = !sp.is_match;  // Invert + Removed: drop the gaps
    SplitPiece(p, std::move(spans), SplitBehavior::kRemoved, out);
  }
};

class CharSplitPre : public PreTokenizer {
 public:
  enum class Kind { kWhitespace, kPunctuation, kDelimiter };
  CharSplitPre(Kind k, SplitBehavior b, uint32_t delim = 0)
      : kind_(k), behavior_(b), delim_(delim) {}
  void SplitOne(Piece&& p, std::vector<Piece>* out) const override {
    auto pred = [this](uint32_t c) {
      switch (kind_) {
        case Kind::kWhitespace:
          return IsWhitespace(c);
        case Kind::kPunctuation:
          return IsPunctuation(c);
        case Kind::kDelimiter:
          return c == delim_;
      }
      return false;
    };
    SplitPiece(p, CharMatches(p.text, pred), behavior_, out);
  }

 private:
  Kind kind_;
  SplitBehavior behavior_;
  uint32_t delim_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> v) : items_(std::move(v)) {}
  void SplitOne(Piece&& p, std::vector<Piece>* out) const override {
    std::vector<Piece> cur;
    cur.push_back(std::move(p));
    for (const auto& pt : items_) pt->PreTokenize(&cur);
    for (auto& c : cur) out->push_back(std::move(c));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

uint32_t SingleChar(const json& j, const char* key, const std::string& where, uint32_t def) {
  return j.contains(key) ? SingleCodePoint(json_field::Get<std::string>(j, key, where), key, where)
                         : def;
}

}  // namespace

std::unique_ptr<PreTokenizer> MakePreTokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    Fail(where, ": expected an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "Split") return std::make_unique<SplitPre>(j, where);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(json_field::Opt<bool>(j, "add_prefix_space", true, where),
                                          json_field::Opt<bool>(j, "use_regex", true, where));
  if (type == "Digits")
    return std::make_unique<DigitsPre>(json_field::Opt<bool>(j, "individual_digits", false, where));
  if (type == "Metaspace") {
    PrependScheme scheme = PrependScheme::kAlways;
    if (j.contains("prepend_scheme")) {
      const std::string s = json_field::Get<std::string>(j, "prepend_scheme", where);
      if (s == "always")
        scheme = PrependScheme::kAlways;
      else if (s == "first")
        scheme = PrependScheme::kFirst;
      else if (s == "never")
        scheme = PrependScheme::kNever;
      else
        Fail(where, ": unknown prepend_scheme '", s, "'");
    } else if (j.contains("add_prefix_space")) {
      scheme = json_field::Get<bool>(j, "add_prefix_space", where) ? PrependScheme::kAlways
                                                                   : PrependScheme::kNever;
    }
    return std::make_unique<MetaspacePre>(SingleChar(j, "replacement", where, 0x2581), scheme,
                                          json_field::Opt<bool>(j, "split", true, where));
  }
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "WhitespaceSplit")
    return std::make_unique<CharSplitPre>(CharSplitPre::Kind::kWhitespace, SplitBehavior::kRemoved);
  if (type == "Punctuation")
    return std::make_unique<CharSplitPre>(
        CharSplitPre::Kind::kPunctuation,
        j.contains("behavior") ? ParseSplitBehavior(j, where) : SplitBehavior::kIsolated);
  if (type == "CharDelimiterSplit")
    return std::make_unique<CharSplitPre>(CharSplitPre::Kind::kDelimiter, SplitBehavior::kRemoved,
                                          SingleChar(j, "delimiter", where, ' '));
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      Fail(where, ": Sequence needs a 'pretokenizers' array");
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i) {
      auto p = MakePreTokenizer(j["pretokenizers"][i],
                                where + ".pretokenizers[" + std::to_string(i) + "]");
      if (p) items.push_back(std::move(p));
    }
    return std::make_unique<SequencePre>(std::move(items));
  }
  Fail(where, ": unsupported pre-tokenizer type '", type, "'");
}

std::unique_ptr<PreTokenizer> MakeByteLevelSplit(const std::string& regex) {
  if (regex.empty()) return std::make_unique<ByteLevelPre>(false, true);
  std::vector<std::unique_ptr<PreTokenizer>> items;
  items.push_back(std::make_unique<SplitPre>(regex, SplitBehavior::kIsolated));
  items.push_back(std::make_unique<ByteLevelPre>(false, false));
  return std::make_unique<SequencePre>(std::move(items));
}

}  // namespace es::tok
