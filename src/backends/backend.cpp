// Backend factory.
#include "edgeseek/internal/backends/backend.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "edgeseek/internal/core/argmax.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/thread_pool.h"

namespace es {

void ComputeStats::Add(const ComputeStats& s) {
  upload_s += s.upload_s, dispatch_s += s.dispatch_s, shader_s += s.shader_s;
  download_s += s.download_s, total_s += s.total_s;
  ops.insert(ops.end(), s.ops.begin(), s.ops.end());
}

void KvStorage::SetBlockTable(int slot, const int32_t*, int) {
  Fail("KV storage of slot ", slot, " is not paged: it has no block table to set");
}

namespace {
// Fails naming the first non-finite value of a row that holds one.
[[noreturn]] void FailNonFinite(const float* row, int64_t r, int64_t vocab) {
  int64_t c = 0;
  while (c < vocab - 1 && IsFiniteLogit(row[c])) ++c;
  Fail("the model computed a non-finite logit (", row[c], " for token ", c, " in output row ", r,
       "): its weights or hyperparameters are corrupt (a NaN or infinite weight value, or a "
       "degenerate rope base or norm epsilon)");
}
}  // namespace

void CheckFiniteLogits(const float* logits, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    // Branch-free over the row so it vectorizes, the position searched only on failure.
    bool ok = true;
    for (int64_t c = 0; c < vocab; ++c) ok &= IsFiniteLogit(row[c]);
    if (!ok) FailNonFinite(row, r, vocab);
  }
}

void ArgmaxRowsHost(const float* logits, int64_t rows, int64_t vocab, int32_t* ids,
                    ThreadPool* pool) {
  std::vector<uint8_t> ok(size_t(std::max<int64_t>(rows, 0)), 1);
  auto scan = [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      bool row_ok = true;
      ids[r] = int32_t(ArgmaxFirst(logits + r * vocab, vocab, IsFiniteLogit, &row_ok));
      ok[size_t(r)] = row_ok;
    }
  };
  if (pool && rows > 1)
    pool->ParallelFor(rows, scan);
  else
    scan(0, rows, 0);
  for (int64_t r = 0; r < rows; ++r)  // the first bad row, as one pass would find it
    if (!ok[size_t(r)]) FailNonFinite(logits + r * vocab, r, vocab);
}

void Backend::ComputeArgmax(const Graph& g, const Batch& batch, KvStorage& kv, int32_t* ids,
                            ComputeStats* stats) {
  const Shape& s = g.node(g.output()).shape;  // [rows, cols]
  std::vector<float> out(size_t(s[0] * s[1]));
  Compute(g, batch, kv, out.data(), stats);
  ArgmaxRowsHost(out.data(), s[0], s[1], ids);
}

void Backend::ComputeSample(const Graph& g, const Batch& batch, KvStorage& kv,
                            const RowSampling* rows, int32_t* ids, ComputeStats* stats) {
  const Shape& s = g.node(g.output()).shape;  // [rows, cols]
  std::vector<float> out(size_t(s[0] * s[1]));
  Compute(g, batch, kv, out.data(), stats);
  CheckFiniteLogits(out.data(), s[0], s[1]);
  for (int64_t r = 0; r < s[0]; ++r) ids[r] = SampleRowHost(out.data() + r * s[1], s[1], rows[r]);
}

#if !defined(ES_HAVE_VULKAN)
bool VulkanBackendBuilt() { return false; }
std::unique_ptr<Backend> CreateVulkanBackend(const BackendOptions&) {
  Fail(
      "backend 'vulkan' is not available: this build has no Vulkan support (install "
      "libvulkan-dev and glslc, then rebuild)");
}
#endif

std::unique_ptr<Backend> CreateBackend(const std::string& name, const BackendOptions& opts) {
  if (name == "cpu") return CreateCpuBackend(opts);
  if (name == "vulkan") return CreateVulkanBackend(opts);
  Fail("unknown backend '", name, "' (expected cpu or vulkan)");
}

}  // namespace es
