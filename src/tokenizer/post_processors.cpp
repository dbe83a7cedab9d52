// Post-processor implementations and their JSON factory.
#include "post_processors.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"

namespace es::tok {

using nlohmann::json;

namespace {

class Template : public PostProcessor {
 public:
  Template(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void Process(std::vector<int32_t>* ids) const override {
    ids->insert(ids->begin(), prefix_.begin(), prefix_.end());
    ids->insert(ids->end(), suffix_.begin(), suffix_.end());
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class Identity : public PostProcessor {
 public:
  void Process(std::vector<int32_t>*) const override {}
};

class SequencePost : public PostProcessor {
 public:
  explicit SequencePost(std::vector<std::unique_ptr<PostProcessor>> v) : items_(std::move(v)) {}
  void Process(std::vector<int32_t>* ids) const override {
    for (const auto& p : items_) p->Process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> items_;
};

// The "special_tokens" map of TemplateProcessing: name -> ids.
std::vector<int32_t> SpecialIds(const json& specials, const std::string& name,
                                const std::string& where) {
  if (!specials.is_object() || !specials.contains(name))
    Fail(where, ": special token '", name, "' is not in 'special_tokens'");
  const json& e = specials[name];
  const std::string we = where + ".special_tokens['" + name + "']";
  if (!e.is_object() || !e.contains("ids") || !e["ids"].is_array())
    Fail(we, ": missing 'ids' (an array)");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < e["ids"].size(); ++i)
    ids.push_back(json_field::As<int32_t>(e["ids"][i], "ids[" + std::to_string(i) + "]", we));
  return ids;
}

std::unique_ptr<PostProcessor> MakeTemplateProcessing(const json& j, const std::string& where) {
  const json null_json;
  const json& specials = j.contains("special_tokens") ? j["special_tokens"] : null_json;
  if (!specials.is_null() && !specials.is_object())
    Fail(where, ": field 'special_tokens' must be an object (got ", specials.type_name(), ")");
  // "single": either the list form [{"SpecialToken": {"id": ...}}, {"Sequence": {"id": "A"}}]
  // or the string form "[CLS] $A [SEP]" (items may carry ":type_id").
  std::vector<std::pair<bool, std::string>> items;  // (is_sequence, special name)
  if (!j.contains("single")) Fail(where, ": TemplateProcessing needs 'single'");
  const json& single = j["single"];
  if (single.is_array()) {
    for (size_t i = 0; i < single.size(); ++i) {
      const json& it = single[i];
      const std::string wi = where + ".single[" + std::to_string(i) + "]";
      if (it.is_object() && it.contains("Sequence"))
        items.emplace_back(true, "");
      else if (it.is_object() && it.contains("SpecialToken"))
        items.emplace_back(
            false, json_field::Get<std::string>(it["SpecialToken"], "id", wi + ".SpecialToken"));
      else
        Fail(wi, ": item must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  } else if (single.is_string()) {
    std::istringstream ss(single.get<std::string>());
    std::string w;
    while (ss >> w) {
      if (w[0] == '$') {
        items.emplace_back(true, "");
      } else {
        const size_t colon = w.rfind(':');
        items.emplace_back(false, colon == std::string::npos ? w : w.substr(0, colon));
      }
    }
  } else {
    Fail(where, ".single: expected an array or a string");
  }
  std::vector<int32_t> prefix, suffix;
  int seen = 0;
  for (const auto& [is_seq, name] : items) {
    if (is_seq) {
      ++seen;
      continue;
    }
    const auto ids = SpecialIds(specials, name, where);
    auto& dst = seen ? suffix : prefix;
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  if (seen != 1) Fail(where, ".single: expected exactly one sequence, got ", seen);
  return std::make_unique<Template>(std::move(prefix), std::move(suffix));
}

int32_t PairId(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2)
    Fail(where, ": '", key, "' must be [token, id]");
  return json_field::As<int32_t>(j[key][1], std::string(key) + "[1]", where);
}

}  // namespace

std::unique_ptr<PostProcessor> MakeTemplate(std::vector<int32_t> prefix,
                                            std::vector<int32_t> suffix) {
  return std::make_unique<Template>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> MakePostProcessor(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    Fail(where, ": expected an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "TemplateProcessing") return MakeTemplateProcessing(j, where);
  if (type == "ByteLevel") return std::make_unique<Identity>();
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return std::make_unique<Template>(std::vector<int32_t>{PairId(j, "cls", where)},
                                      std::vector<int32_t>{PairId(j, "sep", where)});
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array())
      Fail(where, ": Sequence needs a 'processors' array");
    std::vector<std::unique_ptr<PostProcessor>> items;
    for (size_t i = 0; i < j["processors"].size(); ++i) {
      auto p =
          MakePostProcessor(j["processors"][i], where + ".processors[" + std::to_string(i) + "]");
      if (p) items.push_back(std::move(p));
    }
    return std::make_unique<SequencePost>(std::move(items));
  }
  Fail(where, ": unsupported post-processor type '", type, "'");
}

}  // namespace es::tok
