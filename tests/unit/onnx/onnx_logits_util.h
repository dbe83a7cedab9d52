// The ONNX tests' forward: logits of a prefill of `ids` (every row), then of one decode step
// after it (the first id again), concatenated.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"

namespace es::test {

// kv: the KV cache type (nullopt: the backend's default).
inline std::vector<float> PrefillThenStepLogits(const std::shared_ptr<Model>& m,
                                                const std::vector<int32_t>& ids,
                                                const std::string& backend,
                                                std::optional<DType> kv = std::nullopt) {
  BackendOptions bo;
  bo.threads = 2;
  RunnerOptions ro;
  ro.context = 64;
  ro.kv_dtype = kv;
  Runner r(m, CreateBackend(backend, bo), ro);
  Batch b;
  b.Add(0, 0, ids, true);
  b.Finalize();
  std::vector<float> out, step;
  r.Forward(b, &out);
  Batch d;
  d.Add(0, int64_t(ids.size()), {ids[0]}, true);
  d.Finalize();
  r.Forward(d, &step);
  out.insert(out.end(), step.begin(), step.end());
  return out;
}

}  // namespace es::test
