// `edgeseek loadtest`: N concurrent streaming clients against an OpenAI-compatible server
// (ours or llama.cpp's), open loop at a request rate or closed loop; reports throughput and
// TTFT / inter-token / end-to-end latency percentiles (P50, P95, P99).
//
//   edgeseek loadtest --url http://127.0.0.1:8080 -c 16 -n 200 --rate 8 --max-tokens 128
//
// --response-format json_object | SCHEMA.json constrains every request (OpenAI's response_format:
// {"type":"json_object"}, or {"type":"json_schema"} with the file's schema), so the same load
// measures what structured output costs against an unconstrained run.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "verb.h"

namespace es::tools {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct LoadArgs {
  EndpointArgs server;  // --url / --host / --port, --model, --api-key (as `serve` spells them)
  std::string url, model, api_key;  // resolved from `server` by RunLoad
  std::string json_out, endpoint = "chat";
  std::string response_format;  // --response-format: "", "json_object" or a schema file's path
  json format;                  // the request's response_format (null: none), from RunLoad
  int clients = 8, requests = 64, prompt_words = 64, max_tokens = 64;
  double rate = 0;  // requests per second over all clients; 0: closed loop
  uint64_t seed = 1;
};

struct Sample {
  bool ok = false;
  int status = 0;
  std::string error;  // a failure's answer (the server's error message) or the transport error
  double ttft = -1, e2e = 0;
  std::vector<double> gaps;
  int64_t out_tokens = 0, in_tokens = 0;
};

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  double idx = p / 100.0 * double(v.size() - 1);
  size_t lo = size_t(std::floor(idx)), hi = size_t(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

std::string Prompt(int words, uint64_t seed) {
  static const char* kWords[] = {"edge",  "model", "token", "cache",  "server", "latency", "batch",
                                 "river", "stone", "light", "number", "simple", "quiet",   "green"};
  std::mt19937_64 rng(seed);
  std::string s = "Summarise: ";
  for (int i = 0; i < words; ++i) s += std::string(kWords[rng() % 14]) + " ";
  return s;
}

Sample OneRequest(const LoadArgs& a, httplib::Client& cli, int i) {
  Sample s;
  json body = {{"max_tokens", a.max_tokens},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", 0},
               {"ignore_eos", true}};
  if (!a.model.empty()) body["model"] = a.model;
  if (!a.format.is_null()) body["response_format"] = a.format;
  std::string path;
  if (a.endpoint == "chat") {
    body["messages"] = json::array(
        {{{"role", "user"}, {"content", Prompt(a.prompt_words, a.seed + uint64_t(i))}}});
    path = "/v1/chat/completions";
  } else {
    body["prompt"] = Prompt(a.prompt_words, a.seed + uint64_t(i));
    path = "/v1/completions";
  }
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.headers.emplace("Content-Type", "application/json");
  if (!a.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + a.api_key);
  auto t0 = Clock::now();
  double last = -1;
  std::string buf, head;  // head: the answer's first bytes (an error's JSON)
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buf.append(data, len);
    if (head.size() < 300) head.append(data, std::min(len, 300 - head.size()));
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
      json j = json::parse(ev.substr(6), nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && j["usage"].is_object()) {
        s.out_tokens = j["usage"].value("completion_tokens", 0);
        s.in_tokens = j["usage"].value("prompt_tokens", 0);
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const json& c = j["choices"][0];
      std::string text = c.contains("delta")
                             ? c["delta"].value("content", std::string()) +
                                   c["delta"].value("reasoning_content", std::string())
                             : c.value("text", std::string());
      if (text.empty()) continue;
      double t = since();
      if (s.ttft < 0)
        s.ttft = t;
      else
        s.gaps.push_back(t - last);
      last = t;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = cli.send(req, res, err);
  s.e2e = since();
  // A server that sends no usage chunk: count the text events (one per token on llama.cpp).
  if (s.out_tokens == 0 && s.ttft >= 0) s.out_tokens = int64_t(s.gaps.size()) + 1;
  s.status = sent ? res.status : -1;
  s.ok = sent && res.status == 200 && s.ttft >= 0;
  if (!s.ok) s.error = sent ? head : httplib::to_string(err);
  return s;
}

// The response_format object for --response-format (see the header); throws es::Error naming the
// file when it cannot be read or is not a JSON object.
json ResponseFormat(const std::string& arg) {
  if (arg.empty()) return nullptr;
  if (arg == "json_object") return {{"type", "json_object"}};
  std::ifstream f(arg);
  ES_CHECK(f.good(), "loadtest: --response-format: cannot read '", arg,
           "' (give json_object or a JSON Schema file)");
  const json schema = json::parse(f, nullptr, false);
  ES_CHECK(!schema.is_discarded() && schema.is_object(), "loadtest: --response-format: '", arg,
           "' is not a JSON object (a JSON Schema)");
  return {{"type", "json_schema"}, {"json_schema", {{"name", "loadtest"}, {"schema", schema}}}};
}

int RunLoad(LoadArgs a) {
  a.url = a.server.BaseUrl();
  a.format = ResponseFormat(a.response_format);
  a.model = a.server.model_name;
  a.api_key = a.server.api_keys.empty() ? std::string() : a.server.api_keys.front();
  ES_CHECK(a.clients >= 1 && a.requests >= 1, "loadtest: --clients and --requests must be >= 1");
  std::vector<Sample> samples(size_t(a.requests));
  std::atomic<int> next{0};
  auto start = Clock::now();
  // Open loop: request i is due at its Poisson arrival time; closed loop: as soon as a client
  // is free.
  std::vector<double> due(size_t(a.requests), 0.0);
  if (a.rate > 0) {
    std::mt19937_64 rng(a.seed);
    std::exponential_distribution<double> gap(a.rate);
    double t = 0;
    for (auto& d : due) d = (t += gap(rng));
  }
  std::vector<std::thread> threads;
  threads.reserve(size_t(a.clients));
  for (int c = 0; c < a.clients; ++c) {
    threads.emplace_back([&] {
      httplib::Client cli(a.url);
      cli.set_read_timeout(600, 0);
      cli.set_write_timeout(60, 0);
      cli.set_connection_timeout(10, 0);
      for (int i; (i = next.fetch_add(1)) < a.requests;) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(due[size_t(i)])));
        samples[size_t(i)] = OneRequest(a, cli, i);
      }
    });
  }
  for (auto& t : threads) t.join();
  double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, itl, e2e;
  int64_t out_tokens = 0, in_tokens = 0;
  int ok = 0;
  std::map<int, int> failures;
  std::map<int, std::string> first_error;  // per status: what its first failure said
  for (auto& s : samples) {
    if (!s.ok) {
      ++failures[s.status];
      first_error.emplace(s.status, s.error);
      continue;
    }
    ++ok;
    ttft.push_back(s.ttft);
    e2e.push_back(s.e2e);
    itl.insert(itl.end(), s.gaps.begin(), s.gaps.end());
    out_tokens += s.out_tokens;
    in_tokens += s.in_tokens;
  }
  std::printf(
      "loadtest %s  clients %d  requests %d  rate %s  prompt ~%d words  max_tokens %d%s%s\n",
      a.url.c_str(), a.clients, a.requests,
      a.rate > 0 ? (std::to_string(a.rate) + "/s").c_str() : "closed-loop", a.prompt_words,
      a.max_tokens, a.format.is_null() ? "" : "  response_format ",
      a.format.is_null() ? "" : a.format["type"].get<std::string>().c_str());
  std::printf(
      "ok %d  failed %d  wall %.2f s  %.2f req/s  output %.1f tok/s (%lld tokens)  prompt %.1f "
      "tok/s\n",
      ok, a.requests - ok, wall, ok / wall, double(out_tokens) / wall, (long long)out_tokens,
      double(in_tokens) / wall);
  for (auto& [st, n] : failures)
    std::printf("  failed with status %d: %d (first: %s)\n", st, n, first_error[st].c_str());
  std::printf("%-22s %10s %10s %10s %10s\n", "latency (ms)", "P50", "P95", "P99", "mean");
  auto row = [](const char* name, const std::vector<double>& v) {
    double mean = 0;
    for (double x : v) mean += x;
    mean = v.empty() ? NAN : mean / double(v.size());
    std::printf("%-22s %10.2f %10.2f %10.2f %10.2f\n", name, Pct(v, 50) * 1e3, Pct(v, 95) * 1e3,
                Pct(v, 99) * 1e3, mean * 1e3);
  };
  row("time to first token", ttft);
  row("inter-token", itl);
  row("end-to-end", e2e);
  if (!a.json_out.empty()) {
    json j = {{"url", a.url},
              {"clients", a.clients},
              {"requests", a.requests},
              {"rate", a.rate},
              {"prompt_words", a.prompt_words},
              {"max_tokens", a.max_tokens},
              {"response_format", a.format},
              {"ok", ok},
              {"wall_s", wall},
              {"req_per_s", ok / wall},
              {"output_tok_per_s", double(out_tokens) / wall},
              {"output_tokens", out_tokens}};
    for (auto& [name, v] : std::vector<std::pair<std::string, std::vector<double>*>>{
             {"ttft", &ttft}, {"itl", &itl}, {"e2e", &e2e}})
      j[name] = {{"p50_ms", Pct(*v, 50) * 1e3},
                 {"p95_ms", Pct(*v, 95) * 1e3},
                 {"p99_ms", Pct(*v, 99) * 1e3}};
    std::ofstream(a.json_out) << j.dump(2) << "\n";
  }
  return ok == a.requests ? 0 : 1;
}

VerbRun Setup(CLI::App& sub) {
  auto a = std::make_shared<LoadArgs>();
  a->server.AddClient(sub);
  sub.add_option("-c,--clients", a->clients, "concurrent clients");
  sub.add_option("-n,--requests", a->requests, "requests in all");
  sub.add_option("--rate", a->rate, "requests per second (Poisson arrivals); 0: closed loop");
  sub.add_option("--prompt-words", a->prompt_words, "words per prompt");
  sub.add_option("--max-tokens", a->max_tokens, "tokens to generate per request (EOS ignored)");
  sub.add_option("--endpoint", a->endpoint, "chat or completions")
      ->check(CLI::IsMember({"chat", "completions"}));
  sub.add_option("--seed", a->seed, "seed of prompts and arrivals");
  sub.add_option("--response-format", a->response_format,
                 "constrain every request: json_object, or a JSON Schema file (json_schema)");
  sub.add_option("--json", a->json_out, "also write the results as JSON here");
  return [a] { return RunLoad(*a); };
}

VerbRegistrar reg(
    "loadtest",
    "load benchmark of an OpenAI-compatible server: throughput, TTFT and inter-token percentiles",
    Setup);

}  // namespace
}  // namespace es::tools
