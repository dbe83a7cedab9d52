// Decoder implementations and their JSON factory.
#include "decoders.h"

#include <nlohmann/json.hpp>

#include "byte_level.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "normalizers.h"
#include "utf8.h"

namespace es::tok {

using nlohmann::json;

std::string ApplyReplace(const Normalizer& replace, const std::string& text);
std::unique_ptr<Normalizer> MakeReplace(const json& j, const std::string& where);

namespace {

class ByteLevelDec : public Decoder {
 public:
  bool byte_level() const override { return true; }
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const auto& t : *tokens) {
      const size_t mark = bytes.size();
      size_t i = 0;
      bool ok = true;
      while (i < t.size()) {
        const int b = UnicodeToByte(NextCodePoint(t, &i));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {  // a character outside the byte map: the token's own bytes
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens->assign(1, ToValidUtf8(bytes));
  }
};

class MetaspaceDec : public Decoder {
 public:
  MetaspaceDec(uint32_t replacement, bool prepend) : prepend_(prepend) {
    AppendUtf8(&rep_, replacement);
  }
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t k = 0; k < tokens->size(); ++k) {
      std::string& t = (*tokens)[k];
      std::string out;
      size_t pos = 0;
      while (true) {
        const size_t f = t.find(rep_, pos);
        out.append(t, pos, f == std::string::npos ? std::string::npos : f - pos);
        if (f == std::string::npos) break;
        if (!(k == 0 && prepend_)) out.push_back(' ');
        pos = f + rep_.size();
      }
      t = std::move(out);
    }
  }

 private:
  std::string rep_;
  bool prepend_;
};

class ReplaceDec : public Decoder {
 public:
  ReplaceDec(const json& j, const std::string& where) : replace_(MakeReplace(j, where)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) t = ApplyReplace(*replace_, t);
  }

 private:
  std::unique_ptr<Normalizer> replace_;
};

class ByteFallbackDec : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (IsValidUtf8(pending))
        out.push_back(pending);
      else
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      pending.clear();
    };
    for (auto& t : *tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        auto hex = [](char c) {
          return c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : -1;
        };
        const int hi = hex(t[3]), lo = hex(t[4]);
        if (hi >= 0 && lo >= 0) byte = hi * 16 + lo;
      }
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens->swap(out);
  }
};

class FuseDec : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const auto& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

class StripDec : public Decoder {
 public:
  StripDec(uint32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) {
      std::vector<uint32_t> cps;
      size_t i = 0;
      while (i < t.size()) cps.push_back(NextCodePoint(t, &i));
      size_t b = 0, e = cps.size();
      for (size_t k = 0; k < start_ && k < cps.size() && cps[k] == content_; ++k) b = k + 1;
      for (size_t k = 0; k < stop_ && k < cps.size() && cps[cps.size() - 1 - k] == content_; ++k)
        e = cps.size() - 1 - k;
      std::string out;
      for (size_t k = b; k < e; ++k) AppendUtf8(&out, cps[k]);
      t = std::move(out);
    }
  }

 private:
  uint32_t content_;
  size_t start_, stop_;
};

class BpeDec : public Decoder {  // end_of_word suffix -> space, except on the last token
 public:
  explicit BpeDec(std::string suffix) : suffix_(std::move(suffix)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t k = 0; k < tokens->size(); ++k) {
      std::string& t = (*tokens)[k];
      const std::string rep = k + 1 == tokens->size() ? "" : " ";
      std::string out;
      size_t pos = 0;
      while (!suffix_.empty()) {
        const size_t f = t.find(suffix_, pos);
        if (f == std::string::npos) break;
        out.append(t, pos, f - pos);
        out += rep;
        pos = f + suffix_.size();
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

class SequenceDec : public Decoder {
 public:
  explicit SequenceDec(std::vector<std::unique_ptr<Decoder>> v) : items_(std::move(v)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& d : items_) d->DecodeChain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

uint32_t OneChar(const json& j, const char* key, const std::string& where, uint32_t def) {
  return j.contains(key) ? SingleCodePoint(json_field::Get<std::string>(j, key, where), key, where)
                         : def;
}

}  // namespace

std::unique_ptr<Decoder> MakeByteLevelDecoder() { return std::make_unique<ByteLevelDec>(); }

std::unique_ptr<Decoder> MakeDecoder(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    Fail(where, ": expected an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (type == "Metaspace") {
    bool prepend = true;
    if (j.contains("prepend_scheme"))
      prepend = json_field::Get<std::string>(j, "prepend_scheme", where) != "never";
    else if (j.contains("add_prefix_space"))
      prepend = json_field::Get<bool>(j, "add_prefix_space", where);
    return std::make_unique<MetaspaceDec>(OneChar(j, "replacement", where, 0x2581), prepend);
  }
  if (type == "Replace") return std::make_unique<ReplaceDec>(j, where);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Strip")
    return std::make_unique<StripDec>(OneChar(j, "content", where, ' '),
                                      json_field::Opt<size_t>(j, "start", 0, where),
                                      json_field::Opt<size_t>(j, "stop", 0, where));
  if (type == "BPEDecoder")
    return std::make_unique<BpeDec>(json_field::Opt<std::string>(j, "suffix", "</w>", where));
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array())
      Fail(where, ": Sequence needs a 'decoders' array");
    std::vector<std::unique_ptr<Decoder>> items;
    for (size_t i = 0; i < j["decoders"].size(); ++i) {
      auto d = MakeDecoder(j["decoders"][i], where + ".decoders[" + std::to_string(i) + "]");
      if (d) items.push_back(std::move(d));
    }
    return std::make_unique<SequenceDec>(std::move(items));
  }
  Fail(where, ": unsupported decoder type '", type, "'");
}

}  // namespace es::tok
