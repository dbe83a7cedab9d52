// Host cost of one decode step before any kernel runs: the forward graph built for the batch
// (ModelArch::Build, every step) and, on Vulkan, the recorded program found by the graph's key.
// A 28-layer model (R1-Distill-Qwen-7B's depth; the node count does not depend on the widths,
// so the widths are tiny and the weights cost nothing to make):
//   BM_BuildDecodeGraph/layers     ModelArch::Build of a one-row decode batch
// Run: build/bench/graph_bench
#include <benchmark/benchmark.h>

#include <fstream>
#include <memory>
#include <string>

#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/runtime/model.h"

namespace es {
namespace {

std::shared_ptr<Model> DeepModel(int layers) {
  const std::string path = "/tmp/es_graph_bench_" + std::to_string(layers) + ".json";
  std::ofstream(path) << R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": )"
                      << layers << R"(, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": false, "vocab_size": 384, "torch_dtype": "bfloat16"})";
  LoadOptions o;
  o.synthetic = path;
  return Model::Synthetic(path, o);
}

void BM_BuildDecodeGraph(benchmark::State& state) {
  const auto model = DeepModel(int(state.range(0)));
  Batch b;
  b.Add(0, 100, {7});
  b.Finalize();
  size_t nodes = 0;
  for (auto _ : state) {
    const Graph g = model->arch().Build(b);
    nodes = g.nodes().size();
    benchmark::DoNotOptimize(nodes);
  }
  state.counters["nodes"] = double(nodes);
}
BENCHMARK(BM_BuildDecodeGraph)->Arg(28)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace es

BENCHMARK_MAIN();
