// The backend boundary. A backend executes graphs (edgeseek/internal/graph/graph.h) over weights it
// has prepared once (repacked or uploaded) and a KV cache whose storage it owns. Only the runtime
// picks a backend, through CreateBackend; models never see one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "edgeseek/internal/backends/sampling.h"
#include "edgeseek/internal/graph/graph.h"

namespace es {

class ThreadPool;

// Tokens per KV block: the unit of the paged cache's pool (runtime/kv_block_pool.h). 16 rows
// keep a block's rows of one (layer, part) within a few cache lines per head and the rounding
// waste of a sequence under 16 tokens.
constexpr int kKvBlockTokens = 16;

// Storage for the KV caches of `n_slots` sequences of up to `capacity` tokens each, laid out as
// the backend likes. A paged storage (paged()) keeps one pool of n_blocks() blocks of
// kKvBlockTokens tokens (every layer and part of those tokens) and a block table per slot: token
// `pos` of `slot` lives in pool block table[slot][pos / kKvBlockTokens], row pos %
// kKvBlockTokens. A new paged storage maps each slot to its own contiguous blocks (slot *
// blocks_per_slot() + i), so a caller that never sets a table sees the unpaged cache. Read back
// through ReadRow for tests and debugging.
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual const KvSpec& spec() const = 0;
  virtual int n_slots() const = 0;
  virtual int64_t capacity() const = 0;
  virtual size_t bytes() const = 0;
  // Copies one token's row of (layer, part) of a slot into dst (width[part] floats).
  virtual void ReadRow(int slot, int layer, int part, int64_t pos, float* dst) const = 0;
  // ---- paging (a storage that is not paged is one fixed region per slot) ----
  virtual bool paged() const { return false; }
  int64_t blocks_per_slot() const { return (capacity() + kKvBlockTokens - 1) / kKvBlockTokens; }
  virtual int64_t n_blocks() const { return int64_t(n_slots()) * blocks_per_slot(); }
  // Maps the slot's positions [0, n * kKvBlockTokens) to pool blocks blocks[0..n) (each in
  // [0, n_blocks())); positions past them are unmapped until the next call. Paged only.
  virtual void SetBlockTable(int slot, const int32_t* blocks, int n);
  // Commits the memory of the slot's positions [0, tokens) (those its blocks map) ahead of their
  // first write: a hint for storages that commit memory as it is written (the CPU pool maps zero
  // pages lazily), so that the steps writing those positions take no page faults. Contents are
  // unchanged; a storage whose memory is committed when made does nothing (the default).
  virtual void Reserve(int slot, int64_t tokens) {
    (void)slot;
    (void)tokens;
  }
};
struct BackendOptions {
  int threads = 0;            // CPU threads (0 = all)
  std::string device;         // GPU: index or name substring
  bool profile = false;       // per-op timing (timestamps on GPUs)
  bool deterministic = true;  // batch-invariant reductions
  // CPU: weights in a read-only file mapping of at least this many bytes move onto transparent
  // huge pages at load (cpu_backend.cpp MoveOntoHugePages). On the 2-vCPU development VM
  // (session 41) a 7B Q8_0 file (8.1 GB) decoded at 222-224 ms a token instead of 1,153-1,260
  // (load 0.6 -> 10 s), a 1.5B Q4_0 file (1.2 GB) at its speed either way (load +1 s).
  uint64_t huge_pages_min_file = uint64_t(2) << 30;
};

// The memory a backend allocated itself, at peak, for `bench` to set beside plan's prediction.
// A GPU's pools hold blocks from the driver (weights, KV cache, activation arenas, the staging
// ring); each pool's bytes are the blocks it held at its peak (what the driver gave, slack in the
// blocks included) and the bytes its live allocations covered then. The CPU backend leaves it
// empty (its memory is the process's: peak RSS).
struct BackendMemory {
  struct Pool {
    std::string name;              // "weights", "kv", "activations", "batch", "readback", "staging"
    bool device_local = false;     // VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
    bool host_visible = false;     // mappable by the host
    uint64_t peak_bytes = 0;       // blocks held at the pool's peak
    uint64_t peak_used_bytes = 0;  // live allocations at their peak
  };
  std::string device_type;  // "discrete", "integrated", "cpu", ...; empty: no device memory
  std::vector<Pool> pools;
  // Device-local blocks held at once at their peak (the device's high-water mark), and the
  // host-visible blocks that are not device-local (staging, readback on a discrete GPU).
  uint64_t device_local_peak_bytes = 0, host_visible_peak_bytes = 0;
  // Whether device memory is apart from the host's (a discrete GPU): then peak RSS does not
  // hold the model and the device bytes are what plan's memory predicts.
  bool discrete() const { return device_type == "discrete"; }
};

// Timing of one Compute call, split as edge users ask for it.
struct ComputeStats {
  double upload_s = 0, dispatch_s = 0, shader_s = 0, download_s = 0, total_s = 0;
  struct OpTime {
    std::string name;
    Op op;
    double seconds;
  };
  std::vector<OpTime> ops;  // filled with BackendOptions::profile
  // Adds another call's times and appends its ops (a split forward reports as one call).
  void Add(const ComputeStats& s);
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;         // "cpu", "vulkan"
  virtual std::string description() const = 0;  // device, threads, SIMD target
  // Whether this backend can execute node `n` of `g` (type and op support).
  virtual bool Supports(const Graph& g, const Node& n) const = 0;
  // Prepares (repacks, uploads) a weight before first use; called once per tensor by the
  // runtime after loading. Default: nothing.
  virtual void PrepareWeight(const Tensor& w) {}
  // Prepares the weights that ops of `g` read together (a layer's routed experts, stacked per
  // projection on the GPU); called by the runtime with a decode graph before PrepareWeight, so
  // a backend can skip the tensors already prepared here. Default: nothing.
  virtual void PrepareGraph(const Graph& g) {}
  virtual std::unique_ptr<KvStorage> CreateKv(const KvSpec& spec, int n_slots,
                                              int64_t capacity) = 0;
  // A paged cache whose pool holds `n_blocks` blocks (may be fewer than n_slots x
  // blocks_per_slot: sequences share the pool). Default, for a backend without paging: CreateKv,
  // one fixed region per slot (then n_blocks only bounds what the runtime hands out).
  virtual std::unique_ptr<KvStorage> CreatePagedKv(const KvSpec& spec, int n_slots,
                                                   int64_t capacity, int64_t n_blocks) {
    (void)n_blocks;
    return CreateKv(spec, n_slots, capacity);
  }
  // Runs `g` for `batch`; writes the output node (f32, row-major) into `out`.
  virtual void Compute(const Graph& g, const Batch& batch, KvStorage& kv, float* out,
                       ComputeStats* stats = nullptr) = 0;
  // Runs `g` for `batch` and writes the argmax of each output row (lowest index on ties) into
  // `ids` (batch.out_rows.size() entries): greedy decoding. Default: Compute, then the argmax on
  // the host; a GPU backend overrides it so that only the ids come back from the device.
  virtual void ComputeArgmax(const Graph& g, const Batch& batch, KvStorage& kv, int32_t* ids,
                             ComputeStats* stats = nullptr);
  // Whether ComputeSample samples on the device (then the runtime samples through it rather than
  // downloading logits).
  virtual bool device_sampling() const { return false; }
  // Runs `g` for `batch` and samples output row r by rows[r] (sampling.h) into ids[r]. Default:
  // Compute, then SampleRowHost per row.
  virtual void ComputeSample(const Graph& g, const Batch& batch, KvStorage& kv,
                             const RowSampling* rows, int32_t* ids, ComputeStats* stats = nullptr);
  // The KV cache type a runner uses when none is asked for (RunnerOptions::kv_dtype).
  virtual DType default_kv_type() const { return DType::kF32; }
  // Bytes of device memory (or host memory for the CPU) in use at peak.
  virtual size_t peak_bytes() const { return 0; }
  // The pools' bytes at peak (BackendMemory); empty where the backend does not count them.
  virtual BackendMemory memory() const { return {}; }
};

// Throws es::Error when a logit of `rows` x `vocab` is NaN or infinite. A model never computes
// one from sound weights; a NaN or infinite weight value (which loading does not scan for) or a
// degenerate hyperparameter does, and greedy decoding then emitted token 0 forever with exit 0
// (issue 23, tests/fuzz/corrupt_model_probe.py). Host logits only: one compare per logit.
void CheckFiniteLogits(const float* logits, int64_t rows, int64_t vocab);
// ids[r] = the argmax of row r of `logits` ([rows, vocab], host memory; lowest index on ties),
// throwing as CheckFiniteLogits does, in the same pass: Backend::ComputeArgmax's host half.
// With a pool, the rows are spread over its threads (the CPU backend's batched steps: 32 rows of
// a 102,400-id vocabulary are 13 MB to scan); the error is the same, thrown on the caller's.
void ArgmaxRowsHost(const float* logits, int64_t rows, int64_t vocab, int32_t* ids,
                    ThreadPool* pool = nullptr);

// "cpu" or "vulkan"; throws es::Error naming the backend if it is unknown or unavailable.
std::unique_ptr<Backend> CreateBackend(const std::string& name, const BackendOptions& opts);
// fuse: run the fusion passes' plan (cpu/fusion_caps.h; unset: true, the default); false runs the
// plain graph, node by node (the reference the fused CPU path is tested against).
std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& opts,
                                          std::optional<bool> fuse = std::nullopt);
std::unique_ptr<Backend> CreateVulkanBackend(const BackendOptions& opts);  // in backends/vulkan
bool VulkanBackendBuilt();

}  // namespace es
