// SyntheticWeights: the deterministic random weights of synthetic models (Model::Synthetic,
// `edgeseek convert --synthetic`), made one tensor — or one row range of a tensor — at a time,
// so that neither a synthetic load nor a synthetic convert holds the whole model before
// quantizing it (DeepSeek-V2-Lite is 31 GB of bf16).
//
// Values: tensor `name` (ExpectedWeights order) is seeded by hash(name) ^ (seed * golden), and
// its element i is splitmix64 of the state
//     seed_t + b * 0xbf58476d1ce4e5b9 + (i - b + 1) * 0x9e3779b97f4a7c15      (mod 2^64)
// mapped to uniform ±sqrt(3 / fan_in) (norms: 1 ± 0.1), where b is the first element of the
// chunk holding i when [0, n) is cut into `splits` chunks of whole 4096-element units the way
// ThreadPool::ParallelFor cuts it. That is exactly what the whole-tensor generator wrote when it
// ran on a ThreadPool of `splits` threads (one per hardware thread), so the weights — and every
// test, golden and benchmark file made from them — are unchanged; any row range can now be made
// on its own, on any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/formats/gguf_quantize.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/convert.h"

namespace es {

class ThreadPool;

// The configuration of a synthetic model: a preset name or a config.json path; *name gets the
// model's name (the preset, or the file's stem).
ModelConfig SyntheticConfig(const std::string& name_or_config, std::string* name);

class SyntheticWeights {
 public:
  // The chunk count the weights have always been made with: the thread count of ThreadPool(0).
  static int DefaultSplits();

  // Every tensor of ExpectedWeights(c): norms and 1-D tensors in f32, the rest in `dtype`
  // (f32, f16 or bf16). `splits` <= 0: DefaultSplits().
  SyntheticWeights(const ModelConfig& c, DType dtype, uint64_t seed, int splits = 0);

  // Name, type, shape and byte size of each tensor; `data` is null (see Fill / Make).
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<WeightSpec>& specs() const { return specs_; }

  // Writes rows [row_begin, row_end) of tensor i to dst (RowBytes(dtype, cols) bytes a row),
  // elements spread over `pool`; the bytes do not depend on the pool or the row range.
  void Fill(size_t i, int64_t row_begin, int64_t row_end, void* dst, ThreadPool& pool) const;
  // Tensor i whole, owning its bytes.
  Tensor Make(size_t i, ThreadPool& pool) const;

 private:
  struct Gen {
    uint64_t seed;
    float scale, center;
  };
  // Elements [begin, end) of tensor i.
  void FillElements(size_t i, int64_t begin, int64_t end, void* dst) const;

  std::vector<WeightSpec> specs_;
  std::vector<Tensor> tensors_;
  std::vector<Gen> gen_;
  int splits_;
};

// ConvertSyntheticToGguf over given weights (convert.cpp): `c` and `name` describe the model.
GgufQuantizeStats ConvertSyntheticWeightsToGguf(const SyntheticWeights& weights,
                                                const ModelConfig& c, const std::string& name,
                                                const std::string& out_path,
                                                const QuantPolicy& policy,
                                                const ConvertModelOptions& options);

}  // namespace es
