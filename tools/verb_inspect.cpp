// `edgeseek inspect -m PATH | --synthetic NAME`: architecture, parameters, tensor types, memory
// estimate, KV bytes per token (MLA latent vs a naive expanded cache). Reads shapes only: a
// synthetic preset is described without generating its weights.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/models/presets.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/plan.h"
#include "edgeseek/internal/runtime/runner.h"
#include "verb.h"

namespace es::tools {
namespace {

VerbRun Setup(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto synthetic = std::make_shared<std::string>();
  auto dtype = std::make_shared<std::string>("bf16");
  auto ctx = std::make_shared<int64_t>(4096);
  auto json_out = std::make_shared<bool>(false);
  auto kv_type = std::make_shared<std::string>("f16");
  app.add_option("-m,--model", *model,
                 "Hugging Face model folder, .gguf file or .onnx file (or a folder holding one)");
  app.add_option("--synthetic", *synthetic, "built-in preset or config.json");
  app.add_option("--dtype", *dtype, "weight type assumed for synthetic presets");
  app.add_option("-c,--context", *ctx, "context length for the KV estimate");
  AddKvTypeOption(app, *kv_type);
  app.add_flag("--json", *json_out, "one JSON object");
  return [=]() {
    ES_CHECK(!model->empty() || !synthetic->empty(),
             "no model given: pass -m PATH or --synthetic NAME");
    // Shapes and types only (runtime/plan.h, shared with `edgeseek plan`): a synthetic preset
    // with every matrix in --dtype, a GGUF file's or a Hugging Face folder's tensors as stored.
    const ModelWeights w = !synthetic->empty()
                               ? DescribeSynthetic(*synthetic, *dtype, /*uniform=*/true)
                               : DescribeModelFile(*model);
    const ModelConfig& c = w.config;
    const std::string& name = w.name;
    std::map<std::string, std::pair<int64_t, size_t>> by_type;  // type -> (count, bytes)
    const int64_t params = w.parameters();
    const size_t bytes = w.total_bytes();
    size_t expert_bytes = 0;
    for (const PlanTensor& t : w.tensors) {
      if (t.name.find(".mlp.experts.") != std::string::npos ||
          t.name.find("_exps.") != std::string::npos)
        expert_bytes += t.bytes;
      by_type[std::string(Name(t.type))].first++;
      by_type[std::string(Name(t.type))].second += t.bytes;
    }
    // The chosen KV type (--kv-type, f16 as on a GPU by default) sizes the estimate.
    const DType kvt = ParseKvType(*kv_type);
    CheckKvType(c, name, kvt);
    const size_t kv_tok = c.MakeKvSpec(DType::kF32).BytesPerToken();
    const size_t kv_tok16 = c.MakeKvSpec(DType::kF16).BytesPerToken();
    const size_t kv_sel = c.MakeKvSpec(kvt).BytesPerToken();
    const size_t naive_tok = c.ExpandedKvBytesPerToken(DType::kF16);
    // Bytes read per decoded token: all weights, but only the active share of routed experts.
    double active = double(bytes - expert_bytes);
    if (c.n_routed_experts > 0)
      active += double(expert_bytes) * c.num_experts_per_tok / c.n_routed_experts;
    nlohmann::json j = {{"name", name},
                        {"architecture", ArchName(c.arch)},
                        {"parameters", params},
                        {"weight_bytes", bytes},
                        {"active_weight_bytes_per_token", int64_t(active)},
                        {"layers", c.n_layers},
                        {"hidden_size", c.hidden_size},
                        {"vocab_size", c.vocab_size},
                        {"kv_bytes_per_token_f32", kv_tok},
                        {"kv_bytes_per_token_f16", kv_tok16},
                        {"naive_expanded_kv_bytes_per_token_f16", naive_tok},
                        {"kv_type", std::string(Name(kvt))},
                        {"kv_bytes_per_token", kv_sel},
                        {"context", *ctx},
                        {"memory_estimate_bytes", int64_t(bytes + kv_sel * size_t(*ctx))}};
    // Every block type whose blocks the rows split into (head dims % 32 == 0).
    for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
      try {
        CheckKvType(c, name, t);
        j[std::string("kv_bytes_per_token_") + std::string(Name(t))] =
            c.MakeKvSpec(t).BytesPerToken();
      } catch (const Error&) {
      }
    }
    for (auto& [t, v] : by_type) j["tensor_types"][t] = {{"tensors", v.first}, {"bytes", v.second}};
    if (!w.import_notes.empty()) j["import"] = w.import_notes;
    if (*json_out) {
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("model:         %s\n", name.c_str());
    std::printf("architecture:  %s (%d layers, hidden %lld, vocab %lld)\n", ArchName(c.arch),
                c.n_layers, (long long)c.hidden_size, (long long)c.vocab_size);
    if (c.is_mla())
      std::printf(
          "attention:     MLA, %d heads, kv_lora_rank %d, q_lora_rank %d, rope %d, nope %d, v %d\n",
          c.n_heads, c.kv_lora_rank, c.q_lora_rank, c.qk_rope_head_dim, c.qk_nope_head_dim,
          c.v_head_dim);
    else
      std::printf("attention:     %d heads, %d kv heads, head_dim %d\n", c.n_heads, c.n_kv_heads,
                  c.head_dim);
    if (c.n_routed_experts)
      std::printf("moe:           %d routed experts (%d active), %d shared, %s/%s\n",
                  c.n_routed_experts, c.num_experts_per_tok, c.n_shared_experts,
                  c.topk_method.c_str(), c.scoring_func.c_str());
    std::printf("parameters:    %.3f B\n", double(params) / 1e9);
    std::printf("weights:       %s (active per token %s)\n", HumanBytes(double(bytes)).c_str(),
                HumanBytes(active).c_str());
    for (auto& [t, v] : by_type)
      std::printf("  %-8s     %lld tensors, %s\n", t.c_str(), (long long)v.first,
                  HumanBytes(double(v.second)).c_str());
    std::printf("kv cache:      %s/token %s (f16 %s, f32 %s", HumanBytes(double(kv_sel)).c_str(),
                std::string(Name(kvt)).c_str(), HumanBytes(double(kv_tok16)).c_str(),
                HumanBytes(double(kv_tok)).c_str());
    for (DType t : {DType::kQ8_0, DType::kQ4_0})
      if (j.contains(std::string("kv_bytes_per_token_") + std::string(Name(t))))
        std::printf(", %s %s", std::string(Name(t)).c_str(),
                    HumanBytes(double(c.MakeKvSpec(t).BytesPerToken())).c_str());
    std::printf(")");
    if (c.is_mla())
      std::printf(" — naive expanded K/V would be %s/token (%.1fx more)",
                  HumanBytes(double(naive_tok)).c_str(), double(naive_tok) / double(kv_tok16));
    std::printf("\nmemory:        %s at %lld tokens of context (weights + %s KV)\n",
                HumanBytes(double(bytes + kv_sel * size_t(*ctx))).c_str(), (long long)*ctx,
                std::string(Name(kvt)).c_str());
    for (const std::string& n : w.import_notes) std::printf("import:        %s\n", n.c_str());
    return 0;
  };
}

VerbRegistrar reg("inspect", "architecture, parameters, tensor types, memory estimate", Setup);

}  // namespace
}  // namespace es::tools
