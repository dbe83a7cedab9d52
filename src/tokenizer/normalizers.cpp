// Normalizer implementations and their JSON factory.
#include "normalizers.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "byte_level.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "pcre_regex.h"
#include "pieces.h"
#include "utf8.h"

namespace es::tok {

using nlohmann::json;

static std::string MapRun(std::string_view run, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                          static_cast<utf8proc_ssize_t>(run.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) Fail("unicode normalization failed: ", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::string UnicodeNormalize(const std::string& text, UnicodeForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case UnicodeForm::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case UnicodeForm::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case UnicodeForm::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  // ASCII characters are starters (combining class 0) that are never the second half of a
  // composition and never decompose, so they only interact with the marks that follow them.
  // Runs of non-ASCII text, each with the one ASCII character before it, are normalized apart;
  // the ASCII in between is copied. Mostly-ASCII text thus skips utf8proc almost entirely.
  std::string out;
  size_t i = 0, copied = 0;
  const size_t n = text.size();
  while (i < n) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t start = i;
    if (start > copied && static_cast<unsigned char>(text[start - 1]) < 0x80) --start;
    size_t end = i;
    while (end < n && static_cast<unsigned char>(text[end]) >= 0x80) ++end;
    if (out.empty()) out.reserve(n + 16);
    out.append(text, copied, start - copied);
    out += MapRun(std::string_view(text).substr(start, end - start), options);
    copied = i = end;
  }
  if (copied == 0) return text;
  out.append(text, copied, std::string::npos);
  return out;
}

namespace {

std::string FieldStr(const json& j, const char* key, const std::string& where) {
  return json_field::Get<std::string>(j, key, where);
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm f) : form_(f) {}
  void Normalize(std::string* t) const override { *t = UnicodeNormalize(*t, form_); }

 private:
  UnicodeForm form_;
};

class Lowercase : public Normalizer {
 public:
  void Normalize(std::string* t) const override {
    std::string out;
    out.reserve(t->size());
    size_t i = 0;
    while (i < t->size()) {
      const uint32_t cp = NextCodePoint(*t, &i);
      if (cp == 0x130) {  // Rust's char::to_lowercase: İ -> i + COMBINING DOT ABOVE
        out += "i\xCC\x87";
        continue;
      }
      AppendUtf8(&out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    *t = std::move(out);
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* t) const override {
    size_t b = 0, e = t->size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        if (!IsWhitespace(NextCodePoint(*t, &i))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>((*t)[s]) & 0xC0) == 0x80) --s;
        size_t i = s;
        if (!IsWhitespace(NextCodePoint(*t, &i))) break;
        e = s;
      }
    }
    *t = t->substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class StripAccents : public Normalizer {
 public:
  void Normalize(std::string* t) const override {
    std::string out;
    size_t i = 0;
    while (i < t->size()) {
      const size_t s = i;
      const uint32_t cp = NextCodePoint(*t, &i);
      if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_MN) continue;
      out.append(*t, s, i - s);
    }
    *t = std::move(out);
  }
};

class Replace : public Normalizer {
 public:
  Replace(const json& j, const std::string& where) {
    regex_ = std::make_unique<Regex>(ReadPattern(j, where), where);
    content_ = FieldStr(j, "content", where);
  }
  void Normalize(std::string* t) const override { *t = Apply(*t); }
  std::string Apply(const std::string& t) const {
    std::vector<std::pair<size_t, size_t>> m;
    regex_->FindAll(t, &m);
    if (m.empty()) return t;
    std::string out;
    size_t prev = 0;
    for (const auto& [s, e] : m) {
      out.append(t, prev, s - prev);
      out += content_;
      prev = e;
    }
    out.append(t, prev, std::string::npos);
    return out;
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  void Normalize(std::string* t) const override {
    if (!t->empty()) t->insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void Normalize(std::string* t) const override { *t = BytesToUnicode(*t); }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> v) : items_(std::move(v)) {}
  void Normalize(std::string* t) const override {
    for (const auto& n : items_) n->Normalize(t);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

// Exposed for the Replace decoder, which shares the normalizer's JSON form.
std::string ApplyReplace(const Normalizer& replace, const std::string& text) {
  return static_cast<const Replace&>(replace).Apply(text);
}
std::unique_ptr<Normalizer> MakeReplace(const json& j, const std::string& where) {
  return std::make_unique<Replace>(j, where);
}

std::unique_ptr<Normalizer> MakeNormalizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    Fail(where, ": expected an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Strip")
    return std::make_unique<Strip>(json_field::Opt<bool>(j, "strip_left", true, where),
                                   json_field::Opt<bool>(j, "strip_right", true, where));
  if (type == "Replace") return std::make_unique<Replace>(j, where);
  if (type == "Prepend") return std::make_unique<Prepend>(FieldStr(j, "prepend", where));
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      Fail(where, ": Sequence needs a 'normalizers' array");
    std::vector<std::unique_ptr<Normalizer>> items;
    for (size_t i = 0; i < j["normalizers"].size(); ++i) {
      auto n =
          MakeNormalizer(j["normalizers"][i], where + ".normalizers[" + std::to_string(i) + "]");
      if (n) items.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(items));
  }
  Fail(where, ": unsupported normalizer type '", type, "'");
}

}  // namespace es::tok
