// SyntheticWeights: the deterministic random weights of synthetic models (Model::Synthetic,
// `edgeseek convert --synthetic`), made one tensor — or one row range of a tensor — at a time,
// so that neither a synthetic load nor a synthetic convert holds the whole model before
// quantizing it (DeepSeek-V2-Lite is 31 GB of bf16).
//
// Values: a counter-based generator, so any element is a pure function of (seed, tensor name,
// element index) — the same bits on every machine, thread count and row range (x86-64 and
// aarch64 alike: integer hashing, then one float multiply and one add, built without FMA
// contraction). For tensor `name` (ExpectedWeights order) and element i (row-major):
//     key  = Fnv1a64(name) ^ (seed * 0x9e3779b97f4a7c15)
//     k1,k2 = the low and high 32 bits of SplitMix64(key + (i >> 32) + 1)   (one pair per 2^32
//             elements: in practice one per tensor)
//     z    = Mix32(Mix32(uint32(i) + k1) ^ k2)      Mix32: Wellons' lowbias32 (2 multiplies)
//     u    = (z >> 8) * 2^-23 - 1                    uniform on [-1, 1) in steps of 2^-23
//     w    = center + scale * u                      matrices: 0 ± sqrt(3 / fan_in) (unit
//                                                    variance through a layer); norms: 1 ± 0.1
// then rounded to the tensor's type (round to nearest even). The second round keyed by k2 keeps
// tensors whose k1 differ from being shifted copies of one sequence. Highway vectorizes it
// (synthetic_weights.cpp); SyntheticWeights::Value is the plain reference.
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
  // Every tensor of ExpectedWeights(c): norms and 1-D tensors in f32, the rest in `dtype`
  // (f32, f16 or bf16).
  SyntheticWeights(const ModelConfig& c, DType dtype, uint64_t seed);

  // Name, type, shape and byte size of each tensor; `data` is null (see Fill / Make).
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<WeightSpec>& specs() const { return specs_; }

  // Writes rows [row_begin, row_end) of tensor i to dst (RowBytes(dtype, cols) bytes a row),
  // elements spread over `pool`; the bytes do not depend on the pool or the row range.
  void Fill(size_t i, int64_t row_begin, int64_t row_end, void* dst, ThreadPool& pool) const;
  // Elements [begin, end) of tensor i on the calling thread.
  void FillElements(size_t i, int64_t begin, int64_t end, void* dst) const;
  // Tensor i whole, owning its bytes.
  Tensor Make(size_t i, ThreadPool& pool) const;

  // The plain reference of the generator (the header comment's formula): element `index` of
  // tensor i as a float, before rounding to the tensor's type.
  float Value(size_t i, int64_t index) const;

 private:
  struct Gen {
    uint64_t key;
    float scale, center;
  };

  std::vector<WeightSpec> specs_;
  std::vector<Tensor> tensors_;
  std::vector<Gen> gen_;
};

// ConvertSyntheticToGguf over given weights (convert.cpp): `c` and `name` describe the model.
GgufQuantizeStats ConvertSyntheticWeightsToGguf(const SyntheticWeights& weights,
                                                const ModelConfig& c, const std::string& name,
                                                const std::string& out_path,
                                                const QuantPolicy& policy,
                                                const ConvertModelOptions& options);

}  // namespace es
