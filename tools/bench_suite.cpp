// `edgeseek bench --suite FILE.json`: a matrix of benches, one JSON line per case (the case, the
// result, the environment), an optional report with gnuplot plots, and `--compare OLD.jsonl`:
// ratios per matching case with regressions beyond the measured spread flagged (bench_suite.h).
#include "bench_suite.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/bench.h"
#include "edgeseek/internal/runtime/doctor.h"
#include "edgeseek/internal/runtime/runner.h"

namespace es::tools {
namespace {

// A list field of the matrix: absent gives `def`, a scalar one element, an array its elements.
template <typename T>
std::vector<T> List(const nlohmann::json& m, const char* key, std::vector<T> def) {
  if (!m.contains(key)) return def;
  const nlohmann::json& v = m[key];
  std::vector<T> out;
  try {
    if (v.is_array()) {
      for (const auto& e : v) out.push_back(e.get<T>());
    } else {
      out.push_back(v.get<T>());
    }
  } catch (const nlohmann::json::exception&) {
    Fail("bench suite: matrix field '", key, "' has the wrong type (", v.dump(), ")");
  }
  ES_CHECK(!out.empty(), "bench suite: matrix field '", key, "' is an empty list");
  return out;
}

// The environment of a run: what produced the figures.
nlohmann::json Environment() {
  nlohmann::json env;
  env["commit"] = ES_GIT_COMMIT;
  env["hardware_threads"] = std::thread::hardware_concurrency();
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  env["time"] = buf;
  if (std::ifstream f("/proc/cpuinfo"); f) {
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("model name", 0) == 0) {
        env["cpu"] = line.substr(line.find(':') + 2);
        break;
      }
  }
  // doctor's findings (Vulkan loader and devices, SIMD, governor, THP, ...): the counts per
  // severity and every finding that is not ok, so a slow run on a misconfigured machine says so.
  const std::vector<Finding> findings = RunDoctor(SystemDoctorEnv());
  nlohmann::json doctor{{"ok", 0}, {"info", 0}, {"warn", 0}, {"fail", 0}};
  nlohmann::json notes = nlohmann::json::array();
  for (const Finding& f : findings) {
    doctor[SeverityName(f.severity)] = doctor[SeverityName(f.severity)].get<int>() + 1;
    if (f.severity != Severity::kOk)
      notes.push_back(
          {{"check", f.check}, {"severity", SeverityName(f.severity)}, {"message", f.message}});
  }
  doctor["findings"] = notes;
  env["doctor"] = doctor;
  return env;
}

// A Chrome / Perfetto trace (trace event format, times in microseconds) of one decode step of
// the case's shape: `batch` rows, each one token at position n_prompt of its own slot, timed by
// the backend (ComputeStats): the split upload / dispatch / shader / download on one track, and,
// where the backend was built with profiling, its ops end to end on a second track.
nlohmann::json StepTrace(Runner& runner, const SuiteCase& c, int max_ctx) {
  Batch b;
  const int64_t pos = std::min<int64_t>(c.n_prompt, max_ctx - 1);
  for (int s = 0; s < c.batch; ++s) b.Add(s, pos, {0});
  b.Finalize();
  std::vector<float> logits;
  runner.Forward(b, &logits);  // warm: the step's program recorded before the timed one
  ComputeStats st;
  runner.Forward(b, &logits, &st);
  nlohmann::json ev = nlohmann::json::array();
  auto meta = [&](int tid, const char* name) {
    ev.push_back({{"name", "thread_name"},
                  {"ph", "M"},
                  {"pid", 1},
                  {"tid", tid},
                  {"args", {{"name", name}}}});
  };
  ev.push_back({{"name", "process_name"},
                {"ph", "M"},
                {"pid", 1},
                {"tid", 0},
                {"args", {{"name", "edgeseek " + c.backend + " decode step"}}}});
  meta(1, "step split");
  double t = 0;
  for (const auto& [name, sec] : {std::pair<const char*, double>{"upload", st.upload_s},
                                  {"dispatch", st.dispatch_s},
                                  {"shader", st.shader_s},
                                  {"download", st.download_s}}) {
    ev.push_back(
        {{"name", name}, {"ph", "X"}, {"pid", 1}, {"tid", 1}, {"ts", t * 1e6}, {"dur", sec * 1e6}});
    if (std::string(name) == "shader" && !st.ops.empty()) {
      meta(2, "ops");
      double o = t;
      for (const auto& op : st.ops) {
        ev.push_back({{"name", op.name},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", 2},
                      {"ts", o * 1e6},
                      {"dur", op.seconds * 1e6}});
        o += op.seconds;
      }
    }
    t += sec;
  }
  return {{"traceEvents", ev},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"rows", c.batch}, {"position", pos}, {"total_s", st.total_s}}}};
}

// The key that matches a case across runs.
std::string CaseKey(const nlohmann::json& c) {
  return c.value("model", "") + " " + c.value("dtype", "") + " " + c.value("backend", "") + " t" +
         std::to_string(c.value("threads", 0)) + " p" + std::to_string(c.value("n_prompt", 0)) +
         " n" + std::to_string(c.value("n_gen", 0)) + " b" + std::to_string(c.value("batch", 1));
}

// (max - min) / median of a run list; 0 for fewer than two runs.
double Spread(const nlohmann::json& runs) {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(r.get<double>());
  if (v.size() < 2) return 0;
  std::sort(v.begin(), v.end());
  const double med = v[v.size() / 2];
  return med > 0 ? (v.back() - v.front()) / med : 0;
}

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::ifstream f(path);
  ES_CHECK(f, "bench: cannot read '", path, "'");
  std::vector<nlohmann::json> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      Fail("bench: '", path, "' line ", n, " is not a JSON object");
    }
    ES_CHECK(out.back().is_object() && out.back().contains("case") && out.back().contains("result"),
             "bench: '", path, "' line ", n, " is not a suite result (no \"case\" / \"result\")");
  }
  return out;
}

// gnuplot data and script of the report: decode tokens/s against the batch and prefill tokens/s
// against the prompt length, one line per (model, dtype, backend, threads).
void WriteReport(const std::vector<nlohmann::json>& lines, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  // Series: a model's folder or file name (not its path), type, backend, threads; decode also by
  // prompt length, prefill from single-sequence cases only.
  std::map<std::string, std::vector<std::pair<double, double>>> by_batch, by_prompt;
  for (const auto& l : lines) {
    const auto& c = l["case"];
    const auto& r = l["result"];
    std::string model = c.value("model", "");
    while (model.size() > 1 && model.back() == '/') model.pop_back();
    model = std::filesystem::path(model).filename().string();
    const std::string dtype = c.value("dtype", "");
    const std::string series = model + (dtype.empty() ? "" : " " + dtype) + " " +
                               c.value("backend", "") + " t" +
                               std::to_string(c.value("threads", 0));
    by_batch[series + " p" + std::to_string(c.value("n_prompt", 0))].push_back(
        {c.value("batch", 1), r.value("decode_tokens_per_s", 0.0)});
    if (c.value("batch", 1) == 1)
      by_prompt[series].push_back({c.value("n_prompt", 0), r.value("prefill_tokens_per_s", 0.0)});
  }
  auto write = [&](auto& m, const std::string& stem, const char* xlabel, const char* ylabel) {
    std::ofstream dat(dir + "/" + stem + ".dat");
    std::ofstream gp(dir + "/" + stem + ".gp");
    gp << "reset\nset terminal pngcairo size 900,540\nset output '" << stem << ".png'\n"
       << "set xlabel '" << xlabel << "'\nset ylabel '" << ylabel << "'\nset key left top\n"
       << "set termoption noenhanced\n"
       << "set grid\n";
    if (m.empty()) {  // e.g. no single-sequence case for the prefill plot: an empty, labelled one
      gp << "set label 'no case of this suite has this shape' at graph 0.5, 0.5 center\n"
         << "plot [0:1] [0:1] NaN notitle\n";
      return;
    }
    gp << "set logscale x 2\nplot ";
    int idx = 0;
    for (auto& [series, pts] : m) {
      std::sort(pts.begin(), pts.end());
      dat << "# " << series << "\n";
      for (const auto& [x, y] : pts) dat << x << " " << y << "\n";
      dat << "\n\n";
      gp << (idx ? ", " : "") << "'" << stem << ".dat' index " << idx << " with linespoints title '"
         << series << "'";
      ++idx;
    }
    gp << "\n";
  };
  write(by_batch, "decode_vs_batch", "sequences decoding together", "decode tokens/s");
  write(by_prompt, "prefill_vs_prompt", "prompt tokens", "prefill tokens/s");
  const std::string cmd = "cd '" + dir + "' && gnuplot decode_vs_batch.gp prefill_vs_prompt.gp";
  ES_CHECK(std::system("command -v gnuplot >/dev/null 2>&1") == 0,
           "bench --report: gnuplot is not installed (Debian: apt-get install gnuplot-nox); the "
           "data and scripts are in '",
           dir, "'");
  ES_CHECK(std::system(cmd.c_str()) == 0, "bench --report: gnuplot failed in '", dir, "'");
}

}  // namespace

std::vector<SuiteCase> ReadSuite(const std::string& path, int* reps) {
  std::ifstream f(path);
  ES_CHECK(f, "bench suite: cannot read '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    Fail("bench suite: '", path, "' is not valid JSON (", e.what(), ")");
  }
  ES_CHECK(j.is_object() && j.contains("matrix") && j["matrix"].is_object(), "bench suite: '", path,
           "' needs an object with a \"matrix\" object");
  for (const auto& [k, v] : j.items())
    ES_CHECK(k == "name" || k == "matrix" || k == "repetitions", "bench suite: unknown field '", k,
             "' (known: name, matrix, repetitions)");
  *reps = j.value("repetitions", 3);
  ES_CHECK(*reps >= 1 && *reps <= 100, "bench suite: repetitions must be 1..100");
  const nlohmann::json& m = j["matrix"];
  static const char* kKnown[] = {"models",  "dtypes", "backends", "threads",
                                 "prompts", "gen",    "batches"};
  for (const auto& [k, v] : m.items())
    ES_CHECK(std::find(std::begin(kKnown), std::end(kKnown), k) != std::end(kKnown),
             "bench suite: unknown matrix field '", k,
             "' (known: models, dtypes, backends, threads, prompts, gen, batches)");
  ES_CHECK(m.contains("models"), "bench suite: the matrix needs \"models\"");
  const auto models = List<std::string>(m, "models", {});
  const auto dtypes = List<std::string>(m, "dtypes", {""});
  const auto backends = List<std::string>(m, "backends", {"cpu"});
  const auto threads = List<int>(m, "threads", {0});
  const auto prompts = List<int>(m, "prompts", {512});
  const auto gens = List<int>(m, "gen", {128});
  const auto batches = List<int>(m, "batches", {1});
  for (int b : batches) ES_CHECK(b >= 1 && b <= 256, "bench suite: batch ", b, " not in 1..256");
  for (int p : prompts) ES_CHECK(p >= 0, "bench suite: negative prompt length");
  for (int n : gens) ES_CHECK(n >= 0, "bench suite: negative gen length");
  std::vector<SuiteCase> out;
  for (const auto& model : models)
    for (const auto& dt : dtypes)
      for (const auto& be : backends)
        for (int t : threads)
          for (int p : prompts)
            for (int n : gens)
              for (int b : batches) out.push_back({model, dt, be, t, p, n, b});
  return out;
}

int RunSuite(const std::string& suite, const std::string& out_path, const std::string& report,
             const std::string& tokenizer) {
  int reps = 3;
  const std::vector<SuiteCase> cases = ReadSuite(suite, &reps);
  const nlohmann::json env = Environment();
  std::ofstream out;
  if (!out_path.empty()) {
    out.open(out_path);
    ES_CHECK(out, "bench: cannot write '", out_path, "'");
  }
  std::vector<nlohmann::json> lines;
  // One load per (model, dtype, backend, threads), with the slots and context of its largest case.
  size_t i = 0;
  while (i < cases.size()) {
    size_t j = i;
    int max_batch = 1, max_ctx = 0;
    while (j < cases.size() && cases[j].SameLoad(cases[i])) {
      max_batch = std::max(max_batch, cases[j].batch);
      max_ctx = std::max(max_ctx, cases[j].n_prompt + cases[j].n_gen + 8);
      ++j;
    }
    ModelArgs args;
    const SuiteCase& c0 = cases[i];
    if (c0.model.rfind("synthetic:", 0) == 0)
      args.synthetic = c0.model.substr(10);
    else
      args.model = c0.model;
    args.dtype = c0.dtype;
    args.backend = c0.backend;
    args.threads = c0.threads;
    args.context = max_ctx;
    args.tokenizer = tokenizer;
    const auto t0 = std::chrono::steady_clock::now();
    auto model = args.Load();
    auto runner = args.MakeRunner(model, max_batch);
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (; i < j; ++i) {
      const SuiteCase& c = cases[i];
      BenchOptions bo;
      bo.n_prompt = c.n_prompt;
      bo.n_gen = c.n_gen;
      bo.reps = reps;
      bo.batch = c.batch;
      bo.threads = c.threads > 0 ? c.threads : int(std::thread::hardware_concurrency());
      const BenchResult r = RunBench(*runner, bo, load_s);
      nlohmann::json line;
      line["case"] = {{"model", c.model},     {"dtype", c.dtype},       {"backend", c.backend},
                      {"threads", c.threads}, {"n_prompt", c.n_prompt}, {"n_gen", c.n_gen},
                      {"batch", c.batch}};
      line["result"] = r.ToJson();
      line["env"] = env;
      if (!report.empty()) {  // one step's trace per case, next to the plots
        const std::string name = "traces/case_" + std::to_string(i) + ".json";
        std::filesystem::create_directories(report + "/traces");
        std::ofstream tf(report + "/" + name);
        ES_CHECK(tf, "bench: cannot write '", report, "/", name, "'");
        tf << StepTrace(*runner, c, max_ctx).dump() << "\n";
        line["trace"] = name;
      }
      std::printf("%-60s prefill %9.2f t/s  decode %9.2f t/s\n", CaseKey(line["case"]).c_str(),
                  r.prefill_tokens_per_s, r.decode_tokens_per_s);
      std::fflush(stdout);
      if (out) out << line.dump() << "\n" << std::flush;
      lines.push_back(std::move(line));
    }
  }
  if (!report.empty()) {
    std::filesystem::create_directories(report);
    std::ofstream all(report + "/results.jsonl");
    for (const auto& l : lines) all << l.dump() << "\n";
    all.close();
    WriteReport(lines, report);
    std::printf("report: %s (decode_vs_batch.png, prefill_vs_prompt.png, results.jsonl, traces/)\n",
                report.c_str());
  }
  return 0;
}

int CompareResults(const std::string& old_path, const std::string& new_path) {
  const auto old_lines = ReadLines(old_path);
  const auto new_lines = ReadLines(new_path);
  std::map<std::string, const nlohmann::json*> old_by_key;
  for (const auto& l : old_lines) old_by_key[CaseKey(l["case"])] = &l;
  int regressions = 0, matched = 0;
  std::printf("%-60s %10s %10s\n", "case", "prefill", "decode");
  for (const auto& l : new_lines) {
    const std::string key = CaseKey(l["case"]);
    auto it = old_by_key.find(key);
    if (it == old_by_key.end()) {
      std::printf("%-60s (new case)\n", key.c_str());
      continue;
    }
    ++matched;
    const nlohmann::json& o = (*it->second)["result"];
    const nlohmann::json& n = l["result"];
    std::string flags;
    std::printf("%-60s", key.c_str());
    for (const char* what : {"prefill", "decode"}) {
      const std::string rate = std::string(what) + "_tokens_per_s";
      const std::string runs = std::string(what) + "_runs_tokens_per_s";
      const double a = o.value(rate, 0.0), b = n.value(rate, 0.0);
      if (a <= 0 || b <= 0) {
        std::printf(" %10s", "-");
        continue;
      }
      const double ratio = b / a;
      // Beyond the noise: slower than both runs' spreads together allow, and by at least 5%.
      const double noise = std::max(0.05, Spread(o.value(runs, nlohmann::json::array())) +
                                              Spread(n.value(runs, nlohmann::json::array())));
      std::printf(" %9.3fx", ratio);
      if (ratio < 1.0 - noise) {
        flags += std::string(flags.empty() ? "" : ", ") + what;
        ++regressions;
      }
    }
    std::printf("%s\n", flags.empty() ? "" : ("   REGRESSION: " + flags).c_str());
  }
  std::printf("%d cases matched, %d regressions beyond the noise\n", matched, regressions);
  ES_CHECK(matched > 0, "bench --compare: no case of '", new_path, "' is in '", old_path, "'");
  return regressions > 0 ? 3 : 0;
}

}  // namespace es::tools
