// Every chat template in tests/golden/templates/ × every case in cases.json × both values of
// add_generation_prompt, rendered by ChatTemplate, must equal transformers' apply_chat_template
// output byte for byte (expected.jsonl, made by the committed golden script); where transformers
// raised, we must raise an es::Error carrying the same Python exception text.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "edgeseek/internal/tokenizer/chat_template.h"
#include "test_util.h"

namespace es::test {
namespace {

std::string GoldenDir() { return SourceDir() + "/tests/golden/templates"; }

nlohmann::ordered_json LoadJson(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("missing golden file " + path);
  return nlohmann::ordered_json::parse(f);
}

std::string Str(const nlohmann::ordered_json& j) {
  return j.is_string() ? j.get<std::string>() : "";
}

// Shows where two long renderings first differ.
std::string FirstDifference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto window = [&](const std::string& s) {
    return nlohmann::json(s.substr(i < 40 ? 0 : i - 40, 120)).dump();
  };
  return "first difference at byte " + std::to_string(i) + "\n  got:  " + window(got) +
         "\n  want: " + window(want);
}

TEST(TemplateGolden, EveryTemplateAndCaseMatchesTransformers) {
  const auto meta = LoadJson(GoldenDir() + "/meta.json");
  const auto cases_doc = LoadJson(GoldenDir() + "/cases.json");
  std::map<std::string, nlohmann::ordered_json> cases;
  for (const auto& c : cases_doc["cases"]) cases[c["name"].get<std::string>()] = c;

  struct Tpl {
    std::unique_ptr<ChatTemplate> tpl;
    std::string bos, eos;
  };
  std::map<std::string, Tpl> templates;
  for (const auto& name : meta["templates"]) {
    const auto t = LoadJson(GoldenDir() + "/" + name.get<std::string>() + ".json");
    Tpl& e = templates[name.get<std::string>()];
    e.tpl = std::make_unique<ChatTemplate>(t["chat_template"].get<std::string>());
    e.bos = Str(t["bos_token"]);
    e.eos = Str(t["eos_token"]);
  }

  std::ifstream lines(GoldenDir() + "/expected.jsonl");
  ASSERT_TRUE(lines) << "missing " << GoldenDir() << "/expected.jsonl";
  std::string line;
  int checked = 0, errors = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto rec = nlohmann::ordered_json::parse(line);
    const std::string tname = rec["template"], cname = rec["case"];
    const bool agp = rec["add_generation_prompt"];
    SCOPED_TRACE(tname + " / " + cname + " / add_generation_prompt=" + (agp ? "true" : "false"));
    ASSERT_TRUE(templates.count(tname)) << "unknown template " << tname;
    ASSERT_TRUE(cases.count(cname)) << "unknown case " << cname;
    const auto& c = cases[cname];
    const Tpl& t = templates[tname];
    ChatTemplateInputs in;
    in.messages = c["messages"];
    if (c.contains("tools")) in.tools = c["tools"];
    if (c.contains("kwargs")) in.extra = c["kwargs"];
    in.add_generation_prompt = agp;
    in.bos_token = t.bos;
    in.eos_token = t.eos;
    ++checked;
    if (rec.contains("error")) {
      ++errors;
      try {
        const std::string got = t.tpl->Render(in);
        ADD_FAILURE() << "transformers raised \"" << rec["error"].get<std::string>()
                      << "\" but we rendered: " << got;
      } catch (const es::Error& e) {
        EXPECT_NE(std::string(e.what()).find(rec["error"].get<std::string>()), std::string::npos)
            << "our error: " << e.what();
      }
      continue;
    }
    std::string got;
    try {
      got = t.tpl->Render(in);
    } catch (const es::Error& e) {
      ADD_FAILURE() << "render failed: " << e.what();
      continue;
    }
    const std::string want = rec["text"];
    EXPECT_EQ(got, want) << FirstDifference(got, want);
  }
  EXPECT_EQ(checked, meta["n_records"].get<int>());
  EXPECT_EQ(errors, meta["n_errors"].get<int>());
}

}  // namespace
}  // namespace es::test
