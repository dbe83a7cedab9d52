// `edgeseek bench --suite` from the outside: a matrix over a tiny golden checkpoint gives one
// JSON line per case with the case, the result and the environment; --report renders the plots;
// --compare finds no regression against itself and flags a doctored faster baseline (exit 3); a
// bad suite file is one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace es {
namespace {

std::string Write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::vector<nlohmann::json> Lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(BenchSuite, MatrixReportAndCompare) {
  const std::string dir = test::TempDir();
  const std::string model = test::SourceDir() + "/tests/golden/data/models/qwen2_tied";
  const std::string suite = Write(dir, "suite.json", R"({"name": "tiny", "repetitions": 2,
      "matrix": {"models": [")" + model + R"("], "dtypes": ["", "q8_0"], "threads": 1,
                 "prompts": [4, 8], "gen": 3, "batches": [1, 2]}})");
  std::string out, err;
  ASSERT_EQ(test::RunCommand(test::CliPath() + " bench --suite " + suite + " --out " + dir +
                                 "/new.jsonl --report " + dir + "/report",
                             &out, &err),
            0)
      << err;
  const auto lines = Lines(dir + "/new.jsonl");
  ASSERT_EQ(lines.size(), 8u);  // 2 dtypes x 2 prompts x 2 batches
  for (const auto& l : lines) {
    EXPECT_GT(l["result"]["decode_tokens_per_s"].get<double>(), 0) << l.dump();
    EXPECT_EQ(l["result"]["repetitions"], 2);
    EXPECT_FALSE(l["env"]["commit"].get<std::string>().empty());
    // doctor's summary: every finding counted once by severity.
    const auto& doc = l["env"]["doctor"];
    EXPECT_GT(doc["ok"].get<int>() + doc["info"].get<int>() + doc["warn"].get<int>() +
                  doc["fail"].get<int>(),
              0)
        << doc.dump();
    EXPECT_TRUE(doc["findings"].is_array()) << doc.dump();
    // One decode step's Perfetto trace per case: its split on one track, in order, each phase
    // a complete event; the shader phase (the CPU backend's whole step) took time.
    const std::string trace = dir + "/report/" + l["trace"].get<std::string>();
    std::ifstream tf(trace);
    ASSERT_TRUE(tf) << trace;
    const auto tj = nlohmann::json::parse(tf);
    std::vector<std::string> names;
    double end = 0;
    for (const auto& e : tj["traceEvents"]) {
      if (e["ph"] != "X" || e["tid"] != 1) continue;
      names.push_back(e["name"]);
      EXPECT_GE(e["ts"].get<double>(), end - 1e-6) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
      end = e["ts"].get<double>() + e["dur"].get<double>();
      if (e["name"] == "shader") {
        EXPECT_GT(e["dur"].get<double>(), 0.0) << e.dump();
      }
    }
    EXPECT_EQ(names, (std::vector<std::string>{"upload", "dispatch", "shader", "download"}));
    EXPECT_EQ(tj["otherData"]["rows"], l["case"]["batch"]);
  }
  EXPECT_EQ(lines[1]["case"]["batch"], 2);
  EXPECT_EQ(lines[2]["case"]["n_prompt"], 8);
  EXPECT_EQ(lines[4]["case"]["dtype"], "q8_0");
  for (const char* f : {"decode_vs_batch.png", "prefill_vs_prompt.png", "results.jsonl"})
    EXPECT_GT(std::filesystem::file_size(dir + "/report/" + f), 0u) << f;

  // Against itself: every case matched, no regression.
  ASSERT_EQ(test::RunCommand(test::CliPath() + " bench --compare " + dir + "/new.jsonl --results " +
                                 dir + "/new.jsonl",
                             &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("8 cases matched, 0 regressions"), std::string::npos) << out;

  // A baseline that decoded 3x as fast with no spread: every case regressed.
  std::ofstream old(dir + "/old.jsonl");
  for (auto l : lines) {
    auto& r = l["result"];
    r["decode_tokens_per_s"] = 3 * r["decode_tokens_per_s"].get<double>();
    r["decode_runs_tokens_per_s"] = nlohmann::json::array({r["decode_tokens_per_s"]});
    old << l.dump() << "\n";
  }
  old.close();
  EXPECT_EQ(test::RunCommand(test::CliPath() + " bench --compare " + dir + "/old.jsonl --results " +
                                 dir + "/new.jsonl",
                             &out, &err),
            3)
      << out << err;
  EXPECT_NE(out.find("REGRESSION: decode"), std::string::npos) << out;
}

// A suite without single-sequence cases has nothing to put in the prefill-against-prompt plot:
// the report still renders (an empty, labelled plot), where gnuplot once failed on an empty
// `plot` command.
TEST(BenchSuite, ReportWithoutSingleSequenceCases) {
  const std::string dir = test::TempDir();
  const std::string model = test::SourceDir() + "/tests/golden/data/models/qwen2_tied";
  const std::string suite = Write(dir, "suite.json", R"({"repetitions": 1,
      "matrix": {"models": [")" + model + R"("], "threads": 1, "prompts": 4, "gen": 2,
                 "batches": 2}})");
  std::string out, err;
  ASSERT_EQ(
      test::RunCommand(test::CliPath() + " bench --suite " + suite + " --report " + dir + "/report",
                       &out, &err),
      0)
      << err;
  for (const char* f : {"decode_vs_batch.png", "prefill_vs_prompt.png", "traces/case_0.json"})
    EXPECT_GT(std::filesystem::file_size(dir + "/report/" + f), 0u) << f;
}

TEST(BenchSuite, BadSuiteFilesAreOneClearError) {
  const std::string dir = test::TempDir();
  const std::pair<const char*, const char*> cases[] = {
      {"{", "is not valid JSON"},
      {R"({"matrix": {"models": ["x"], "batch": [1]}})", "unknown matrix field 'batch'"},
      {R"({"matrix": {"models": []}})", "'models' is an empty list"},
      {R"({"matrix": {"models": ["x"], "batches": [0]}})", "batch 0 not in 1..256"},
      {R"({"matrix": {"models": ["x"], "threads": "two"}})", "'threads' has the wrong type"},
      {R"({"matrix": {"dtypes": ["q4_0"]}})", "needs \"models\""},
      {R"({"matrix": {"models": ["x"]}, "reps": 2})", "unknown field 'reps'"}};
  int i = 0;
  for (const auto& [text, want] : cases) {
    const std::string path = Write(dir, "bad" + std::to_string(i++) + ".json", text);
    std::string out, err;
    EXPECT_NE(test::RunCommand(test::CliPath() + " bench --suite " + path, &out, &err), 0) << text;
    EXPECT_NE(err.find(want), std::string::npos) << text << "\n" << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  std::string out, err;
  EXPECT_NE(
      test::RunCommand(test::CliPath() + " bench --compare " + dir + "/bad0.json", &out, &err), 0);
  EXPECT_NE(err.find("needs --suite"), std::string::npos) << err;
}

}  // namespace
}  // namespace es
