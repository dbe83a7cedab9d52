// `edgeseek kld -m REF | --synthetic PRESET [--dtype REF_TYPE] --types q8_0,q4_0,... | --test PATH`
// Quantization quality: runs the reference model and each quantized variant (the same weights
// quantized at load by each type's policy, or another model file given with --test) over one
// token sequence — a text file through the tokenizer (--text), explicit ids (--ids) or
// deterministic random ids (-n, for synthetic models) — and prints, per variant, the mean, 99th
// percentile and max KL divergence of the next-token distributions, the top-1 agreement and the
// relative L2 error of the logits (src/runtime/quality.cpp). --json: one JSON object per line.
// --kv-types f16,q8_0,q4_0: instead of weight types, KV cache types against --kv-type (the
// reference cache, f32 unless given) with the weights as loaded (CompareKvTypes).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/quality.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"
#include "verb.h"

namespace es::tools {
namespace {

struct KldArgs {
  ModelArgs model;
  std::string types = "q8_0";
  std::string kv_types;
  std::string test;
  std::string text;
  std::string ids;
  int n_tokens = 256;
  int chunk = 128;
  bool json = false;
};

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int32_t> Tokens(const KldArgs& a, const Model& m) {
  if (!a.ids.empty()) return ParseIds(a.ids);
  if (!a.text.empty()) {
    ES_CHECK(m.tokenizer(), "kld: --text needs a tokenizer (the model has none; pass --tokenizer)");
    std::ifstream f(a.text);
    ES_CHECK(f.good(), "kld: cannot read '", a.text, "'");
    std::stringstream ss;
    ss << f.rdbuf();
    std::vector<int32_t> t = m.tokenizer()->Encode(ss.str());
    ES_CHECK(!t.empty(), "kld: '", a.text, "' has no tokens");
    if (a.n_tokens > 0 && int64_t(t.size()) > a.n_tokens) t.resize(size_t(a.n_tokens));
    return t;
  }
  ES_CHECK(a.n_tokens > 0, "kld: -n must be positive");
  return RandomTokens(a.n_tokens, m.vocab_size(), a.model.seed);
}

// --kv-types: one model, a runner per KV cache type.
int RunKvTypes(const KldArgs& a) {
  auto m = a.model.Load();
  const std::vector<int32_t> toks = Tokens(a, *m);
  const DType ref = a.model.kv_type.empty() ? DType::kF32 : ParseKvType(a.model.kv_type);
  std::vector<DType> types;
  for (const std::string& t : SplitList(a.kv_types)) types.push_back(ParseKvType(t));
  ES_CHECK(!types.empty(), "kld: --kv-types is empty");
  const auto make = [&](DType t) {
    ModelArgs ma = a.model;
    ma.kv_type = std::string(Name(t));
    if (ma.context == 0) ma.context = int(toks.size());
    return ma.MakeRunner(m);
  };
  const std::string name = a.model.model.empty() ? "synthetic " + a.model.synthetic : a.model.model;
  const std::vector<QualityStats> res = CompareKvTypes(make, toks, ref, types, a.chunk);
  if (!a.json)
    std::printf(
        "model: %s (%s backend), %zu tokens, reference KV %s\n%-10s %12s %12s %12s %9s %10s %14s\n",
        name.c_str(), a.model.backend.c_str(), toks.size(), std::string(Name(ref)).c_str(),
        "kv type", "mean KL", "p99 KL", "max KL", "top-1 %", "rel L2", "KV bytes/token");
  for (size_t i = 0; i < types.size(); ++i) {
    const QualityStats& s = res[i];
    const size_t bpt = m->config().MakeKvSpec(types[i]).BytesPerToken();
    if (a.json) {
      nlohmann::json j = {{"model", name},
                          {"backend", a.model.backend},
                          {"tokens", toks.size()},
                          {"reference_kv_type", std::string(Name(ref))},
                          {"kv_type", std::string(Name(types[i]))},
                          {"mean_kl", s.mean_kl},
                          {"p99_kl", s.p99_kl},
                          {"max_kl", s.max_kl},
                          {"top1_agreement", s.top1_agreement},
                          {"rel_l2", s.rel_l2},
                          {"kv_bytes_per_token", bpt}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-10s %12.6f %12.6f %12.6f %9.2f %10.5f %14zu\n",
                  std::string(Name(types[i])).c_str(), s.mean_kl, s.p99_kl, s.max_kl,
                  s.top1_agreement, s.rel_l2, bpt);
    }
    std::fflush(stdout);
  }
  return 0;
}

int Run(const KldArgs& a) {
  if (!a.kv_types.empty()) return RunKvTypes(a);
  const auto t0 = std::chrono::steady_clock::now();
  auto ref_model = a.model.Load();
  const std::vector<int32_t> toks = Tokens(a, *ref_model);
  for (int32_t t : toks)
    ES_CHECK(t >= 0 && t < ref_model->vocab_size(), "kld: token id ", t,
             " is outside the vocabulary (", ref_model->vocab_size(), " tokens)");
  const int64_t vocab = ref_model->vocab_size();
  std::vector<float> ref;
  {
    auto runner = a.model.MakeRunner(ref_model);
    ref = SequenceLogits(*runner, toks, a.chunk);
  }
  const std::string ref_name =
      a.model.model.empty() ? "synthetic " + a.model.synthetic : a.model.model;
  if (!a.json)
    std::printf(
        "reference: %s (%s), %zu tokens, vocabulary %lld\n%-10s %12s %12s %12s %9s %10s %10s\n",
        ref_name.c_str(), a.model.dtype.empty() ? "as stored" : a.model.dtype.c_str(), toks.size(),
        (long long)vocab, "type", "mean KL", "p99 KL", "max KL", "top-1 %", "rel L2", "weights MB");
  const size_t ref_bytes = ref_model->weight_bytes();
  ref_model.reset();
  std::vector<std::pair<std::string, ModelArgs>> variants;
  if (!a.test.empty()) {
    ModelArgs m = a.model;
    m.synthetic.clear();
    m.model = a.test;
    m.dtype.clear();
    variants.emplace_back(a.test, m);
  } else {
    for (const std::string& t : SplitList(a.types)) {
      ModelArgs m = a.model;
      m.dtype = t;
      variants.emplace_back(t, m);
    }
  }
  ES_CHECK(!variants.empty(), "kld: --types is empty");
  for (const auto& [label, args] : variants) {
    auto m = args.Load();
    ES_CHECK(m->vocab_size() == vocab, "kld: ", label, " has a vocabulary of ", m->vocab_size(),
             " but the reference has ", vocab);
    std::vector<float> test;
    {
      auto runner = args.MakeRunner(m);
      test = SequenceLogits(*runner, toks, a.chunk);
    }
    const QualityStats s = CompareLogits(ref, test, vocab);
    const double mb = double(m->weight_bytes()) / 1e6;
    if (a.json) {
      nlohmann::json j = {{"reference", ref_name},
                          {"type", label},
                          {"tokens", toks.size()},
                          {"mean_kl", s.mean_kl},
                          {"p99_kl", s.p99_kl},
                          {"max_kl", s.max_kl},
                          {"top1_agreement", s.top1_agreement},
                          {"rel_l2", s.rel_l2},
                          {"weight_mb", mb},
                          {"reference_weight_mb", double(ref_bytes) / 1e6}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-10s %12.6f %12.6f %12.6f %9.2f %10.5f %10.1f\n", label.c_str(), s.mean_kl,
                  s.p99_kl, s.max_kl, s.top1_agreement, s.rel_l2, mb);
    }
    std::fflush(stdout);
  }
  if (!a.json)
    std::fprintf(stderr, "kld: %.1f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

VerbRun Setup(CLI::App& app) {
  auto a = std::make_shared<KldArgs>();
  a->model.Add(app);
  app.add_option("--types", a->types,
                 "comma-separated quantization types/presets to compare (q8_0,q6_k,q4_k,q4_0,...)");
  app.add_option("--kv-types", a->kv_types,
                 "comma-separated KV cache types (f16,q8_0,q4_0) to compare against --kv-type "
                 "(default f32), same weights");
  app.add_option("--test", a->test,
                 "compare against this model (folder or GGUF file) instead of --types");
  app.add_option("--text", a->text, "text file to tokenize as the sequence");
  app.add_option("--ids", a->ids, "comma-separated token ids as the sequence");
  app.add_option("-n,--n-tokens", a->n_tokens,
                 "sequence length (random ids; or the cap for --text)");
  app.add_option("--chunk", a->chunk, "prefill chunk")->check(CLI::PositiveNumber);
  app.add_flag("--json", a->json, "one JSON object per line");
  return [a] { return Run(*a); };
}

const VerbRegistrar kReg("kld",
                         "quantization quality: KL divergence and top-1 agreement vs the reference",
                         Setup);

}  // namespace
}  // namespace es::tools
