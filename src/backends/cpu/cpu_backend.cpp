// CPU backend: executes graphs node by node on a persistent thread pool. Matmuls go to the SIMD
// kernels (kernels/matmul.h); the other ops are simple loops parallelised over rows or heads.
// The fusion passes (graph/passes/fusions.h, what the CPU takes: cpu/fusion_caps.h) fold a
// residual add, a SwiGLU with its gate and k's rope into the node that produces or reads them
// (RunFused; the matmuls' in the kernels' own regions, matmul.h MatMulEpilogue); every fused op
// computes what its decomposition did, bit for bit.
// Every op computes each batch row independently with a fixed reduction order, so a sequence's
// results never depend on what else shares its batch (batch invariance).
//
// Weights: PrepareWeight can repack the matrices whose type has another layout on this CPU
// (kernels/repack.h: Q4_0 / Q8_0 on x86 AVX2+, bit-identical results) into memory the backend
// owns; their raw pages, where they are a read-only file mapping, are handed back to the kernel
// (the model still owns them and other readers, e.g. an embedding lookup, fault them back in).
// ES_CPU_REPACK picks the types: unset = the defaults below (none today), 0 = none, 1 = every
// supported type, or a comma list of type names (q4_0,q8_0).
//
// The weights that stay where the model holds them have their page tables filled at load
// (madvise MADV_POPULATE_READ, on the pool's threads) while their total fits in the memory the
// kernel reports available: a mixture-of-experts model otherwise takes its routed experts' first
// touches (a page fault per 4 KB page or page-cache folio, up to a few hundred per decode step)
// inside the timed tokens. Where transparent huge pages are on, a file-mapped weight's whole 2 MiB
// pages are first moved onto them at the same addresses (MoveOntoHugePages): the same bytes,
// anonymous memory instead of the file's 4 KiB page-cache pages.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "cpu/fusion_caps.h"
#include "cpu/kernels/matmul.h"
#include "cpu/kernels/repack.h"
#include "cpu/kernels/vec.h"
#include "cpu/mla_form.h"
#include "cpu/paged_kv.h"
#include "cpu/reference.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/graph/passes/fusions.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es {
namespace {

// Attention scores, one buffer per thread and use, kept across calls. CpuBackend::ReserveScores
// sizes them on every pool thread for a cache's whole context when the cache is made: a worker
// that first won a chunk of an attention region in a late decode step (ThreadPool: the caller
// runs the chunks a worker has not claimed yet, so which thread that is follows timing) grew its
// buffer inside that step, a page fault mid-decode
// (KvReserve.GenerateDecodeStepsTakeNoPageFaults saw one at step 65 in 2 of 3 runs).
enum ScoreUse { kDenseScores, kMlaDecodeScores, kMlaPrefillScores, kScoreUses };
std::vector<float>& Scores(ScoreUse use) {
  thread_local std::vector<float> p[kScoreUses];
  return p[use];
}
// Rows of scores per use: one (dense), MlaAttention's head groups of at most 8, MlaPrefill's
// blocks of 4 query rows.
constexpr int64_t kScoreRows[kScoreUses] = {1, 8, 4};

using Clock = std::chrono::steady_clock;

// What PrepareWeight repacks (see the header comment).
struct RepackPolicy {
  std::set<DType> types;
  // Only weights whose raw copy can be handed back (a read-only file mapping): a weight the
  // model holds in its own memory (quantized at load, synthetic) would then be resident twice.
  bool only_file_backed = true;
};

// The types repacked when ES_CPU_REPACK is unset: none. Measured on the 1.5B model on the 2-core
// development machine (docs/log/2026-11-30-cpu-weight-repacking.md), the repacked kernels were
// not faster beyond the noise of a shared machine; ES_CPU_REPACK=1 turns them on.
std::set<DType> DefaultRepackTypes() { return {}; }

// ES_CPU_REPACK: unset = the defaults, file-backed weights only; 0 = none; 1 = every supported
// type; or a comma list of type names. An explicit choice repacks the model's own memory too.
RepackPolicy RepackPolicyFromEnv() {
  const char* env = std::getenv("ES_CPU_REPACK");
  const std::string v = env ? env : "";
  RepackPolicy p;
  if (v.empty()) {
    p.types = DefaultRepackTypes();
    return p;
  }
  p.only_file_backed = false;
  if (v == "0" || v == "off") return p;
  if (v == "1" || v == "all") {
    p.types = {DType::kQ4_0, DType::kQ8_0};
    return p;
  }
  std::stringstream ss(v);
  for (std::string name; std::getline(ss, name, ',');)
    if (!name.empty()) p.types.insert(ParseDType(name));  // throws naming the bad type
  return p;
}

// Whether [p, p + n) lies inside one read-only file mapping of this process (/proc/self/maps):
// then its pages can be dropped and are read back from the file if touched again. `where`, if
// given, gets the mapping's inode and size.
struct FileMapping {
  unsigned long inode = 0;
  size_t bytes = 0;
};
bool InReadOnlyFileMapping(const void* p, size_t n, FileMapping* where = nullptr) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0, inode = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perms, &inode) != 4)
      continue;
    if (a < lo || a >= hi) continue;
    if (where) *where = {inode, size_t(hi - lo)};
    return a + n <= hi && inode != 0 && perms[1] != 'w';
  }
  return false;
}

// Drops this process's pages of a read-only file mapping (whole pages inside the range only).
void ReleaseFilePages(const void* p, size_t n) {
  if (!InReadOnlyFileMapping(p, n)) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + page - 1) / page * page, hi = (a + n) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

// Whether transparent huge pages can back memory advised MADV_HUGEPAGE ("always" or
// "madvise" in sysfs).
bool TransparentHugePagesOn() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return s.find("[always]") != std::string::npos || s.find("[madvise]") != std::string::npos;
}

// Moves the whole 2 MiB pages inside [p, p + n), a read-only file mapping, onto anonymous
// transparent huge pages at the same addresses, with the same bytes, read-only again: pieces of
// 64 MiB are copied into fresh 2 MiB-aligned memory (on `pool`) and mremap'ed over the file's
// pages. The bytes at the edges (and everything where a step fails) stay file pages. Returns
// the bytes moved. Why: the kernel here maps a file's page cache in 4 KiB pages only, and a
// decode step streaming GBs of them misses the TLB on every page (worse in a guest, whose
// walks are nested): 7B Q8_0 decode p50 ~410 ms on the file's pages against 223 on huge pages
// with the same layout (docs/plan.md, session 41). The moved pages are anonymous: a later
// MADV_DONTNEED of them (MappedFile::ReleasePages) would zero them; every such release happens
// while the model is read, before a backend prepares its weights.
size_t MoveOntoHugePages(const void* p, size_t n, ThreadPool& pool) {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20, kPiece = uintptr_t(64) << 20;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) / kHuge * kHuge;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n) / kHuge * kHuge;
  if (b <= a) return 0;
  size_t moved = 0;
  for (uintptr_t lo = a; lo < b; lo += kPiece) {
    const size_t len = size_t(std::min(kPiece, b - lo));
    void* raw =
        mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) break;
    const uintptr_t r = reinterpret_cast<uintptr_t>(raw), al = (r + kHuge - 1) / kHuge * kHuge;
    if (al > r) munmap(raw, al - r);  // keep [al, al + len): 2 MiB-aligned
    if (r + kHuge > al) munmap(reinterpret_cast<void*>(al + len), r + kHuge - al);
    void* dst = reinterpret_cast<void*>(al);
    madvise(dst, len, MADV_HUGEPAGE);
    // Page tables of both sides filled in bulk first (a fault per 4 KiB source page, or per
    // huge page allocated at the first write, is slower than one call for the range).
    pool.ParallelFor(int64_t(len / kHuge), [&](int64_t b0, int64_t e0, int) {
      const size_t off = size_t(b0) * kHuge, m = size_t(e0 - b0) * kHuge;
      madvise(reinterpret_cast<void*>(lo + off), m, MADV_POPULATE_READ);
      madvise(reinterpret_cast<void*>(al + off), m, MADV_POPULATE_WRITE);
      std::memcpy(reinterpret_cast<uint8_t*>(al) + off, reinterpret_cast<const uint8_t*>(lo) + off,
                  m);
    });
    if (mprotect(dst, len, PROT_READ) != 0 || mremap(dst, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
                                                     reinterpret_cast<void*>(lo)) == MAP_FAILED) {
      munmap(dst, len);
      break;
    }
    moved += len;
  }
  return moved;
}

// MemAvailable of /proc/meminfo in bytes (0 when it cannot be read).
size_t AvailableMemoryBytes() {
  std::ifstream mi("/proc/meminfo");
  for (std::string line; std::getline(mi, line);) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return size_t(kb) * 1024;
  }
  return 0;
}

// kv_b of MLA node n (src 5) when the matmul kernels read it as [H (dn + dv), r], else null.
const Tensor* MlaKvB(const Graph& g, const Node& n) {
  const Tensor* kvb = n.src.size() > 5 && n.src[5] >= 0 ? g.node(n.src[5]).weight : nullptr;
  const MlaParams& m = n.Params<MlaParams>();
  const int64_t H = m.heads, dn = m.dn, dv = m.dv, r = m.rank;
  return kvb && kvb->shape == Shape{H * (dn + dv), r} && cpu::MatMulSupports(kvb->dtype) &&
                 r % BlockElems(kvb->dtype) == 0
             ? kvb
             : nullptr;
}

using cpu::CpuKv;

class CpuBackend final : public Backend {
 public:
  CpuBackend(const BackendOptions& o, bool fuse)
      : opts_(o), fuse_(fuse), pool_(o.threads), repack_(RepackPolicyFromEnv()) {}
  ~CpuBackend() override {
    if (opts_.profile) PrintProfile();
    // Every activation is back in the pool between computes (Compute releases its buffers).
    for (auto& [n, p] : free_) std::free(p);
  }
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    std::string d =
        "cpu: " + std::to_string(pool_.size()) + " threads, SIMD " + cpu::SimdTargetName();
    if (prefaulted_bytes_ > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ", %.2f GB of weights prefaulted in %.0f ms",
                    double(prefaulted_bytes_) / 1e9, prefault_s_ * 1e3);
      d += buf;
      if (huge_bytes_ > 0) {
        std::snprintf(buf, sizeof buf, " (%.2f GB moved onto huge pages)",
                      double(huge_bytes_) / 1e9);
        d += buf;
      }
    }
    if (!packed_.empty()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ", %zu weights repacked (%.2f GB) in %.0f ms", packed_.size(),
                    double(packed_bytes_) / 1e9, packed_s_ * 1e3);
      d += buf;
    }
    return d;
  }
  bool Supports(const Graph& g, const Node& n) const override {
    if (n.op == Op::kMatMul) return cpu::MatMulSupports(g.node(n.src[1]).dtype);
    return true;
  }
  void PrepareWeight(const Tensor& w) override;
  // MLA nodes whose kv_b is block-quantized: a Q8_0 copy of their WukT (see QWeight).
  void PrepareGraph(const Graph& g) override;
  // Fills the page tables of `w`'s bytes (see the header comment); false when the budget of
  // available memory is spent (then the weight is faulted in by its first use, as before).
  bool Prefault(const Tensor& w);
  // Whether w lies in a read-only file mapping whose weights move onto huge pages: transparent
  // huge pages on, and the file's mapping, as first seen whole, of opts_.huge_pages_min_file bytes
  // or more.
  bool HugeFile(const Tensor& w);
  std::unique_ptr<KvStorage> CreateKv(const KvSpec& spec, int n_slots, int64_t capacity) override {
    ReserveScores(capacity, spec.mla);
    return std::make_unique<CpuKv>(
        spec, n_slots, capacity,
        int64_t(n_slots) * ((capacity + kKvBlockTokens - 1) / kKvBlockTokens));
  }
  std::unique_ptr<KvStorage> CreatePagedKv(const KvSpec& spec, int n_slots, int64_t capacity,
                                           int64_t n_blocks) override {
    ReserveScores(capacity, spec.mla);
    return std::make_unique<CpuKv>(spec, n_slots, capacity, n_blocks);
  }
  void Compute(const Graph& g, const Batch& batch, KvStorage& kv, float* out,
               ComputeStats* stats) override {
    Run(g, batch, kv, out, nullptr, stats);
  }
  // The argmax straight from the output buffer: no [rows, vocab] copy (152k floats a row for
  // Qwen2) per greedy step or speculative verification.
  void ComputeArgmax(const Graph& g, const Batch& batch, KvStorage& kv, int32_t* ids,
                     ComputeStats* stats) override {
    Run(g, batch, kv, nullptr, ids, stats);
  }
  size_t peak_bytes() const override { return peak_; }

 private:
  // Every pool thread's attention scores (Scores) sized for `capacity` positions: the dense use,
  // and MLA's two for an MLA cache (a dense model's thread kept 12 unused floats a position).
  void ReserveScores(int64_t capacity, bool mla) {
    pool_.RunOnAll([capacity, mla](int, int) {
      for (int u = 0; u < kScoreUses; ++u) {
        if (u != kDenseScores && !mla) continue;
        std::vector<float>& p = Scores(ScoreUse(u));
        const size_t n = size_t(kScoreRows[u] * std::max<int64_t>(capacity, 1));
        if (p.size() < n) p.resize(n);
      }
    });
  }
  // A weight repacked by PrepareWeight, valid while the tensor still points at `data`.
  struct Packed {
    const void* data;
    DType dtype;
    Shape shape;
    cpu::PackedWeight w;
  };
  // Runs `g`; the output node's rows go to `out` (logits) or their argmax to `ids`.
  void Run(const Graph& g, const Batch& batch, KvStorage& kv, float* out, int32_t* ids,
           ComputeStats* stats);
  const Packed* FindPacked(const Tensor& w) const;
  // The Q8_0 copy PrepareGraph made of `w`, or `w` itself.
  const Tensor& QWeight(const Tensor& w) const;
  const float* F32(const Tensor* t);  // small weights (norms, biases) as f32, cached
  float* Alloc(size_t n);
  void Release(float* p, size_t n);
  // epi (or null): cpu::MatMulEpilogue, run in the kernels' own regions.
  void MatMul(const float* x, int64_t R, int64_t K, const Tensor& w, const float* bias, float* y,
              int64_t ldy, const cpu::MatMulEpilogue* epi = nullptr);
  // y[:, 0:n1-n0] = x · W[n0:n1]ᵀ on `pool` (the columns n0..n1 of W's output; W's rows are its
  // output columns, so the slice is a row range of the weight).
  // bias: the full [N] bias or null (its n0..n1 are added).
  void MatMulCols(const float* x, int64_t R, int64_t K, const Tensor& w, int64_t n0, int64_t n1,
                  float* y, int64_t ldy, ThreadPool& pool, const float* bias = nullptr);
  // fn(item, serial_pool) for items [0, n), each on one of the pool's threads; `serial_pool` is
  // that thread's own one-thread pool, so the kernels fn calls run inside the item. Threads take
  // the next item from a shared counter (items of uneven cost balance out); which thread runs an
  // item never changes its result, so batch invariance holds.
  void ForEachItem(int64_t n, const std::function<void(int64_t, ThreadPool&)>& fn);
  void Attention(const Node& n, const Batch& b, CpuKv& kv, const float* q, float* y);
  // MLA attention: per sequence, the absorbed or the non-absorbed form (cpu/mla_form.h).
  void Mla(const Node& n, const Graph& g, const Batch& b, CpuKv& kv, const float* q, float* y);
  // The absorbed form for batch rows `rows` (ascending); y: [rows.size(), H dv], row i for
  // batch row rows[i].
  // kvb: kv_b when the kernels read it as [H (dn + dv), r] (Wuv[h] is its rows h (dn + dv) + dn
  // .. + dv, read in the checkpoint's type), else null (the node's Wuv).
  void MlaAbsorbed(const Node& n, const Graph& g, const Batch& b, CpuKv& kv, const Tensor* kvb,
                   const std::vector<int64_t>& rows, const float* q, float* y);
  // The non-absorbed form for sequence s's rows of the step, into their rows of y [T, H dv]:
  // K_nope and V of its keys expanded through kv_b [H (dn + dv), r], then attention with
  // dk = dn + dr and dv.
  void MlaExpanded(const Node& n, const Tensor& kvb, const BatchSeq& s, CpuKv& kv, const float* q,
                   float* y);
  // Routed experts: each of the R rows of x [R, D] through its top-k experts' SwiGLU FFNs,
  // summed by the router's weights into y [R, D].
  // res: [R, D] added to y as each row's sum is written (a fused residual add), or null.
  void MoE(const Node& n, const Graph& g, const float* x, int64_t R, float* y,
           const float* res = nullptr);
  struct ExpertRows;
  // The router's top-k for each row, and the rows compacted per local expert (see ExpertRows):
  // experts [e0, e0 + EL) of the router's are held here (a head split's range; all by default),
  // choices outside it are left to another device.
  ExpertRows RouteRows(const MoeParams& p, const float* x, int64_t R, int64_t D,
                       const Tensor& router, const float* bias, int e0, int EL);
  // act [M, I] = silu(xs · gateᵀ) · (xs · upᵀ) and dn [M, D] = act · downᵀ for every active
  // expert's compacted rows of xs [M, D]; items (expert, column block) spread over the pool.
  void ExpertFfns(const Node& n, const Graph& g, const ExpertRows& er, int64_t D, int64_t I,
                  const float* xs, float* act, float* dn);
  // y [R, D]: each row sums its experts' outputs dn in its own top-k order.
  void CombineExperts(const ExpertRows& er, int64_t R, int64_t D, int K, const float* dn, float* y,
                      const float* res);
  // One node of Run: its op on its inputs (the buffers of earlier nodes in buf) into y.
  void RunNode(const Node& n, const Graph& g, const Batch& b, CpuKv& kv,
               const std::vector<float*>& buf, float* y);
  // Node i with what plan `f` folded into it (FusedNode), into y (the output of the node whose
  // output it writes: f.out_node[i] or i).
  void RunFused(int i, const Graph& g, const FusionPlan& f, const Batch& b, CpuKv& kv,
                const std::vector<float*>& buf, float* y);
  // Matmul i with its residual add, or (a dual GEMV) its gate and SwiGLU: the kernels' own regions
  // (MatMulEpi, MatMulPairEpi), each block of outputs finished by the thread that computed it while
  // it is in cache.
  void FusedMatMul(int i, const Graph& g, const FusionPlan& f, const std::vector<float*>& buf,
                   float* y);
  // kv_store i of rows its folded rope rotates on the way into the cache.
  void RopeStore(int i, const Graph& g, const FusionPlan& f, const Batch& b, CpuKv& kv,
                 const std::vector<float*>& buf);
  // y [T, cols] = rows of the embedding table E for the batch's tokens, as f32.
  void Embed(const Tensor& E, const Batch& b, int64_t cols, float* y);
  // y = w · x / rms(x), row by row, x and y [rows, cols].
  void RmsNorm(const float* x, const float* w, float eps, int64_t rows, int64_t cols, float* y);
  // y = x with node n's heads rotated at the batch's positions (kNeox halves or interleaved
  // pairs), x and y [rows, cols].
  void Rope(const Node& n, const Batch& b, const float* x, int64_t rows, int64_t cols, float* y);
  // --profile: node n's time (into stats, when given) and its family's time and bytes.
  // Node i as plan ran it: what it folded is appended to its family's name.
  void ProfileNode(const Node& n, const Graph& g, const Batch& b, const CpuKv& kv, bool decode,
                   double dt, ComputeStats* stats, const FusionPlan& plan, size_t i);
  // The bytes node `n` reads from weights and the KV cache (for --profile's GB/s); MoE adds the
  // experts it ran (moe_bytes_, set by MoE()).
  double NodeBytes(const Node& n, const Graph& g, const Batch& b, const CpuKv& kv) const;
  void PrintProfile() const;

  // --profile: per phase (0 = decode steps of one row per sequence, 1 = the others) and per op
  // family (the node's name with its layer index dropped), wall time and bytes read.
  struct Family {
    double s = 0, bytes = 0;
    int64_t count = 0;
  };
  struct PhaseProfile {
    int64_t runs = 0, rows = 0;
    double total_s = 0;
    std::map<std::string, Family> fam;
  };
  PhaseProfile profile_[2];
  double moe_bytes_ = 0;  // weights the last MoE() read (router + the experts that had rows)

  BackendOptions opts_;
  bool fuse_;  // run the fusion plan (CreateCpuBackend)
  ThreadPool pool_;
  std::mutex f32_mu_;
  std::unordered_map<const Tensor*, std::vector<float>> f32_cache_;
  RepackPolicy repack_;                               // ES_CPU_REPACK
  std::unordered_map<const Tensor*, Packed> packed_;  // repacked weights, owned
  // Q8_0 copies of MLA WukT from a block-quantized kv_b (PrepareGraph), by the model's tensor;
  // each with the model tensor's data pointer, to check it still is that tensor.
  std::unordered_map<const Tensor*, std::pair<const void*, Tensor>> qweights_;
  size_t packed_bytes_ = 0;     // their total size
  double packed_s_ = 0;         // time spent repacking (and releasing)
  size_t prefault_budget_ = 0;  // bytes Prefault may still fill (set at its first call)
  bool prefault_started_ = false;
  const bool huge_pages_ = TransparentHugePagesOn();  // Prefault moves file weights onto them
  std::map<unsigned long, bool> huge_files_;          // inode: whether its weights move
  size_t huge_bytes_ = 0;                             // moved so far
  size_t prefaulted_bytes_ = 0;                       // filled so far
  double prefault_s_ = 0;                             // time spent filling
  std::multimap<size_t, float*> free_;                // buffer pool by size (floats)
  size_t live_ = 0, peak_ = 0;
};

void CpuBackend::PrepareWeight(const Tensor& w) {
  // Matrices only, K (the row) in whole blocks.
  if (!repack_.types.count(w.dtype) || w.shape.size() != 2 || !cpu::RepackSupports(w.dtype) ||
      w.cols() % 32 != 0 || FindPacked(w) ||
      (repack_.only_file_backed && !InReadOnlyFileMapping(w.data, w.nbytes))) {
    if (!FindPacked(w)) Prefault(w);
    return;
  }
  const auto t0 = Clock::now();
  Packed p{w.data, w.dtype, w.shape, cpu::Repack(w.data, w.dtype, w.rows(), w.cols(), pool_)};
  ReleaseFilePages(w.data, w.nbytes);
  packed_bytes_ += p.w.bytes;
  packed_.insert_or_assign(&w, std::move(p));
  packed_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

bool CpuBackend::Prefault(const Tensor& w) {
  if (!prefault_started_) {
    // Half of what is available: the rest stays for the KV cache, activations and other
    // processes. Pages already resident (a model's own memory) cost only the walk.
    prefault_budget_ = AvailableMemoryBytes() / 2;
    prefault_started_ = true;
  }
  if (!w.data || w.nbytes == 0 || w.nbytes > prefault_budget_) return false;
  prefault_budget_ -= w.nbytes;
  const auto t0 = Clock::now();
  if (HugeFile(w)) huge_bytes_ += MoveOntoHugePages(w.data, w.nbytes, pool_);
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(w.data) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(w.data) + w.nbytes + page - 1) / page * page;
  // Chunks of 4 MB over the pool's threads (filling page tables from the page cache is ~1 µs a
  // page; a cold file is read by both threads at once). An error (a kernel older than 5.14 has
  // no MADV_POPULATE_READ) leaves the pages to their first touch.
  constexpr uintptr_t kChunk = uintptr_t(4) << 20;
  pool_.ParallelFor(int64_t((hi - lo + kChunk - 1) / kChunk), [&](int64_t b0, int64_t e0, int) {
    const uintptr_t a = lo + uintptr_t(b0) * kChunk, b = std::min(hi, lo + uintptr_t(e0) * kChunk);
    madvise(reinterpret_cast<void*>(a), b - a, MADV_POPULATE_READ);
  });
  prefaulted_bytes_ += w.nbytes;
  prefault_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  return true;
}

bool CpuBackend::HugeFile(const Tensor& w) {
  FileMapping m;
  if (!huge_pages_ || !InReadOnlyFileMapping(w.data, w.nbytes, &m)) return false;
  // Decided at the first weight of a file: its mapping is whole then (moves split it).
  return huge_files_.emplace(m.inode, m.bytes >= opts_.huge_pages_min_file).first->second;
}

const CpuBackend::Packed* CpuBackend::FindPacked(const Tensor& w) const {
  auto it = packed_.find(&w);
  if (it == packed_.end()) return nullptr;
  const Packed& p = it->second;
  return p.data == w.data && p.dtype == w.dtype && p.shape == w.shape ? &p : nullptr;
}

void CpuBackend::PrepareGraph(const Graph& g) {
  // The absorbed form reads WukT [H r, dn] every decode step. ModelArch builds it in f16 from a
  // block-quantized kv_b (~2 MB a V2-Lite layer); its Q8_0 copy halves the bytes. Only there:
  // an f16 or bf16 kv_b's WukT holds the checkpoint's own values and stays as it is.
  for (const Node& n : g.nodes()) {
    if (n.op != Op::kMlaAttention || n.src.size() < 6 || n.src[5] < 0) continue;
    const Tensor* kvb = g.node(n.src[5]).weight;
    const Tensor* wk = g.node(n.src[3]).weight;
    if (!kvb || !wk || !IsQuantized(kvb->dtype) || IsQuantized(wk->dtype) ||
        wk->shape.size() != 2 || wk->cols() % BlockElems(DType::kQ8_0) != 0 || qweights_.count(wk))
      continue;
    Tensor q = AllocTensor(wk->name + ".q8_0", DType::kQ8_0, wk->shape);
    auto* dst = static_cast<uint8_t*>(MutableData(q));
    pool_.ParallelFor(
        wk->rows(),
        [&](int64_t b0, int64_t e0, int) {
          std::vector<float> row(size_t(wk->cols()));
          for (int64_t i = b0; i < e0; ++i) {
            ConvertRowToF32(wk->dtype, wk->bytes() + size_t(i) * wk->row_bytes(), row.data(),
                            wk->cols());
            Quantize(DType::kQ8_0, row.data(), dst + size_t(i) * q.row_bytes(), wk->cols());
          }
        },
        64);
    qweights_.emplace(wk, std::make_pair(wk->data, std::move(q)));
  }
}

const Tensor& CpuBackend::QWeight(const Tensor& w) const {
  auto it = qweights_.find(&w);
  return it != qweights_.end() && it->second.first == w.data ? it->second.second : w;
}

const float* CpuBackend::F32(const Tensor* t) {
  if (!t) return nullptr;
  if (t->dtype == DType::kF32) return t->as<float>();
  std::lock_guard<std::mutex> lock(f32_mu_);
  auto it = f32_cache_.find(t);
  if (it == f32_cache_.end()) it = f32_cache_.emplace(t, ToF32(*t)).first;
  return it->second.data();
}

float* CpuBackend::Alloc(size_t n) {
  auto it = free_.lower_bound(n);
  if (it != free_.end() && it->first == n) {
    float* p = it->second;
    free_.erase(it);
    return p;
  }
  auto* p = static_cast<float*>(std::aligned_alloc(64, (n * 4 + 63) / 64 * 64 + 64));
  ES_CHECK(p, "out of memory allocating an activation of ", n * 4, " bytes");
  live_ += n * 4;
  peak_ = std::max(peak_, live_);
  return p;
}

void CpuBackend::Release(float* p, size_t n) { free_.emplace(n, p); }

void CpuBackend::MatMulCols(const float* x, int64_t R, int64_t K, const Tensor& w, int64_t n0,
                            int64_t n1, float* y, int64_t ldy, ThreadPool& pool,
                            const float* bias) {
  if (const Packed* p = FindPacked(w); p && K == p->w.K) {
    // Repacked weights are whole: only the full range (ExpertColumnBlocks keeps it so).
    ES_ASSERT(n0 == 0 && n1 == w.rows());
    cpu::PackedMatMul(x, R, p->w, bias, y, ldy, pool);
    return;
  }
  ES_CHECK(cpu::MatMulSupports(w.dtype), "cpu backend: no matmul kernel for weight type ",
           Name(w.dtype), " (tensor ", w.name, ")");
  cpu::MatMul(x, R, K, w.bytes() + size_t(n0) * w.row_bytes(), w.dtype, n1 - n0,
              bias ? bias + n0 : nullptr, y, ldy, pool);
}

void CpuBackend::ForEachItem(int64_t n, const std::function<void(int64_t, ThreadPool&)>& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  // An error inside an item (a kernel's check) must reach the caller as an exception, not end
  // the process from a pool thread: the first one is kept, the remaining items are skipped.
  std::mutex mu;
  std::exception_ptr error;
  // One chunk per thread, each taking items from the shared counter until none are left. Through
  // ParallelFor's claiming, a chunk whose worker the OS has not scheduled yet is run by the
  // caller once its own is done — by then the counter is spent, so it returns at once — instead
  // of the region waiting a time slice for that worker (RunOnAll waited for every thread).
  pool_.ParallelFor(pool_.size(), [&](int64_t, int64_t, int) {
    thread_local ThreadPool serial(1);
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      try {
        fn(i, serial);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next.store(n, std::memory_order_relaxed);
      }
    }
  });
  if (error) std::rethrow_exception(error);
}

void CpuBackend::MatMul(const float* x, int64_t R, int64_t K, const Tensor& w, const float* bias,
                        float* y, int64_t ldy, const cpu::MatMulEpilogue* epi) {
  if (const Packed* p = FindPacked(w); p && K == p->w.K) {
    cpu::PackedMatMul(x, R, p->w, bias, y, ldy, pool_, epi);
    return;
  }
  if (cpu::MatMulSupports(w.dtype)) {
    if (epi)
      cpu::MatMulEpi(x, R, K, w.data, w.dtype, w.rows(), bias, y, ldy, *epi, pool_);
    else
      cpu::MatMul(x, R, K, w.data, w.dtype, w.rows(), bias, y, ldy, pool_);
    return;
  }
  Fail("cpu backend: no matmul kernel for weight type ", Name(w.dtype), " (tensor ", w.name, ")");
}

void CpuBackend::Attention(const Node& n, const Batch& b, CpuKv& kv, const float* q, float* y) {
  const AttentionParams& a = n.Params<AttentionParams>();
  const int64_t T = b.n_tokens(), Hq = a.q_heads, Hkv = a.kv_heads, dk = a.dk, dv = a.dv;
  const float scale = a.scale;
  const int64_t group = Hq / Hkv;
  pool_.ParallelFor(T * Hq, [&](int64_t begin, int64_t end, int) {
    // A row's scores, one buffer per thread sized for the whole context (Scores): a vector made
    // per call grew with each step's position, and the heap took a new page (a page fault inside
    // a decode step) every few steps.
    std::vector<float>& p = Scores(kDenseScores);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t t = u / Hq, h = u % Hq, kh = h / group;
      const BatchSeq& s = b.seqs[size_t(b.row_seq[size_t(t)])];
      const int64_t n_ctx = b.positions[size_t(t)] + 1;  // causal: positions 0..pos
      const cpu::KvRows K = kv.Rows(s.slot, n.layer, 0), V = kv.Rows(s.slot, n.layer, 1);
      const size_t ko = RowBytes(K.type(), kh * dk),
                   vo = RowBytes(V.type(), kh * dv);  // the head in a row
      const float* qh = q + t * Hq * dk + h * dk;
      if (p.size() < size_t(n_ctx)) p.resize(size_t(std::max<int64_t>(n_ctx, kv.capacity())));
      float mx = -INFINITY;
      for (int64_t j = 0; j < n_ctx; ++j) {
        p[size_t(j)] = cpu::KvDot(qh, K.Row(j) + ko, K.type(), dk) * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      float sum = 0;
      for (int64_t j = 0; j < n_ctx; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
      const float inv = 1.0f / sum;
      float* o = y + t * Hq * dv + h * dv;
      std::fill(o, o + dv, 0.0f);
      for (int64_t j = 0; j < n_ctx; ++j) {
        cpu::KvAxpy(p[size_t(j)] * inv, V.Row(j) + vo, V.type(), o, dv);
      }
    }
  });
}

void CpuBackend::Mla(const Node& n, const Graph& g, const Batch& b, CpuKv& kv, const float* q,
                     float* y) {
  const MlaParams& m = n.Params<MlaParams>();
  const int64_t T = b.n_tokens(), H = m.heads, dn = m.dn, dr = m.dr, dv = m.dv, r = m.rank;
  // Each sequence's rows take the form with fewer multiply-adds (mla_form.h); without kv_b, or
  // with a kv_b the kernels cannot read as [H (dn + dv), r], every row stays absorbed.
  const Tensor* kvb = MlaKvB(g, n);
  const bool can_expand = kvb != nullptr;
  std::vector<int64_t> absorbed;  // batch rows of the absorbed form
  for (const BatchSeq& s : b.seqs) {
    if (can_expand && cpu::MlaSeqExpands(H, dn, dr, dv, r, s.pos0, s.n_tokens)) {
      MlaExpanded(n, *kvb, s, kv, q, y);
      continue;
    }
    for (int64_t t = s.row0; t < s.row0 + s.n_tokens; ++t) absorbed.push_back(t);
  }
  if (absorbed.empty()) return;
  if (int64_t(absorbed.size()) == T) {
    MlaAbsorbed(n, g, b, kv, kvb, absorbed, q, y);
    return;
  }
  // Some rows only: computed into a compact [rows, H dv] and scattered to their batch rows.
  const int64_t A = int64_t(absorbed.size()), ow = H * dv;
  float* ya = Alloc(size_t(A * ow));
  MlaAbsorbed(n, g, b, kv, kvb, absorbed, q, ya);
  for (int64_t i = 0; i < A; ++i)
    std::memcpy(y + absorbed[size_t(i)] * ow, ya + i * ow, size_t(ow) * 4);
  Release(ya, size_t(A * ow));
}

void CpuBackend::MlaAbsorbed(const Node& n, const Graph& g, const Batch& b, CpuKv& kv,
                             const Tensor* kvb, const std::vector<int64_t>& rows, const float* q,
                             float* y) {
  const MlaParams& m = n.Params<MlaParams>();
  const int64_t T = int64_t(rows.size()), H = m.heads, dn = m.dn, dr = m.dr, dv = m.dv, r = m.rank;
  const Tensor& wuk_t = QWeight(*g.node(n.src[3]).weight);
  // Wuv[h]: kv_b's rows as stored when given (a Q4_0 kv_b: a quarter of the f16 Wuv's bytes;
  // an f16 one: the same values), else the node's Wuv.
  const Tensor& wuv = kvb ? *kvb : *g.node(n.src[4]).weight;
  const int64_t wuv_row0 = kvb ? dn : 0, wuv_stride = kvb ? dn + dv : dv;
  const float scale = m.scale;
  const int64_t qw = H * (dn + dr);
  // qlat, olat: [H][T, r] (one head's rows contiguous, as its GEMV/GEMM reads and writes them);
  // row i of the step is batch row rows[i].
  float* qlat = Alloc(size_t(H * T * r));
  float* olat = Alloc(size_t(H * T * r));
  // 1. q_lat[h] = q_nope[h] · WukT[h]ᵀ : [T, r], one item per head (one parallel region for all
  //    heads instead of two per head).
  ForEachItem(H, [&](int64_t h, ThreadPool& serial) {
    thread_local std::vector<float> qn;
    qn.resize(size_t(T * dn));
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(&qn[size_t(t * dn)], q + rows[size_t(t)] * qw + h * (dn + dr), size_t(dn) * 4);
    MatMulCols(qn.data(), T, dn, wuk_t, h * r, (h + 1) * r, qlat + h * T * r, r, serial);
  });
  // 2. o_lat[h][t] = Σ_j softmax_j(scale · (q_lat·C_j + q_pe·KPE_j)) C_j, per (row, head).
  //    Items are (row, group of G heads): every head shares the row's latent cache, so each
  //    latent row is loaded once for the G heads of the group (from L1 for all but the first)
  //    instead of once per head; G is as large as the thread count allows (at most 8: the G
  //    output rows of r floats stay in L1). Per head the operations and their order are those of
  //    one head alone, so the group size never changes a bit.
  const int64_t G = std::clamp<int64_t>(H * T / pool_.size(), 1, kScoreRows[kMlaDecodeScores]);
  const int64_t groups = (H + G - 1) / G;
  pool_.ParallelFor(T * groups, [&](int64_t begin, int64_t end, int) {
    std::vector<float>& p = Scores(kMlaDecodeScores);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t t = u / groups, h0 = (u % groups) * G, g1 = std::min(G, H - h0);
      const int64_t bt = rows[size_t(t)];  // the batch row
      const BatchSeq& s = b.seqs[size_t(b.row_seq[size_t(bt)])];
      const int64_t n_ctx = b.positions[size_t(bt)] + 1;
      const cpu::KvRows C = kv.Rows(s.slot, n.layer, 0), KPE = kv.Rows(s.slot, n.layer, 1);
      p.resize(size_t(G * n_ctx));
      float mx[8], inv[8];
      for (int64_t g = 0; g < g1; ++g) mx[g] = -INFINITY;
      // An f32 cache (the CPU default) takes DotRows / AxpyRows: each latent row is loaded once
      // per 4 heads into registers instead of once per head, with every head's result
      // bit-identical to Dot / Axpy (= KvDot / KvAxpy on f32); other types decode per head.
      const bool f32 = C.type() == DType::kF32 && KPE.type() == DType::kF32;
      const float* qlat0 = qlat + (h0 * T + t) * r;           // head g at + g·T·r
      const float* qpe0 = q + bt * qw + h0 * (dn + dr) + dn;  // head g at + g·(dn+dr)
      float* olat0 = olat + (h0 * T + t) * r;                 // head g at + g·T·r
      for (int64_t j = 0; j < n_ctx; ++j) {
        const uint8_t* cr = C.Row(j);
        const uint8_t* kr = KPE.Row(j);
        float sc[8], sp[8];
        if (f32) {
          cpu::DotRows(qlat0, T * r, g1, reinterpret_cast<const float*>(cr), r, sc);
          cpu::DotRows(qpe0, dn + dr, g1, reinterpret_cast<const float*>(kr), dr, sp);
        } else {
          for (int64_t g = 0; g < g1; ++g) {
            sc[g] = cpu::KvDot(qlat0 + g * T * r, cr, C.type(), r);
            sp[g] = cpu::KvDot(qpe0 + g * (dn + dr), kr, KPE.type(), dr);
          }
        }
        for (int64_t g = 0; g < g1; ++g) {
          const float v = (sc[g] + sp[g]) * scale;
          p[size_t(g * n_ctx + j)] = v;
          mx[g] = std::max(mx[g], v);
        }
      }
      for (int64_t g = 0; g < g1; ++g) {
        float sum = 0;
        float* pg = &p[size_t(g * n_ctx)];
        for (int64_t j = 0; j < n_ctx; ++j) sum += (pg[j] = std::exp(pg[j] - mx[g]));
        inv[g] = 1.0f / sum;
        float* o = olat + ((h0 + g) * T + t) * r;
        std::fill(o, o + r, 0.0f);
      }
      for (int64_t j = 0; j < n_ctx; ++j) {
        float w[8];
        for (int64_t g = 0; g < g1; ++g) w[g] = p[size_t(g * n_ctx + j)] * inv[g];
        if (f32) {
          cpu::AxpyRows(w, reinterpret_cast<const float*>(C.Row(j)), olat0, T * r, g1, r);
        } else {
          for (int64_t g = 0; g < g1; ++g)
            cpu::KvAxpy(w[g], C.Row(j), C.type(), olat0 + g * T * r, r);
        }
      }
    }
  });
  // 3. out[i, h*dv:(h+1)*dv] = o_lat[h][i] · Wuv[h]ᵀ, one item per head.
  ForEachItem(H, [&](int64_t h, ThreadPool& serial) {
    const int64_t n0 = h * wuv_stride + wuv_row0;
    MatMulCols(olat + h * T * r, T, r, wuv, n0, n0 + dv, y + h * dv, H * dv, serial);
  });
  Release(qlat, size_t(H * T * r));
  Release(olat, size_t(H * T * r));
}

void CpuBackend::MlaExpanded(const Node& n, const Tensor& kvb, const BatchSeq& s, CpuKv& kv,
                             const float* q, float* y) {
  const MlaParams& m = n.Params<MlaParams>();
  const int64_t H = m.heads, dn = m.dn, dr = m.dr, dv = m.dv, r = m.rank;
  const int64_t qw = H * (dn + dr), kvw = H * (dn + dv), T = s.n_tokens;
  const int64_t keys = s.pos0 + T;  // positions 0 .. the last row's
  const float scale = m.scale;
  const cpu::KvRows C = kv.Rows(s.slot, n.layer, 0), KPE = kv.Rows(s.slot, n.layer, 1);
  // X: [keys, r] the latent rows, KP: [keys, dr] the rope keys, as f32 (an f32 cache is copied;
  // other types decode through KvAxpy into zeros: exact, 1·v + 0).
  float* X = Alloc(size_t(keys * r));
  float* KP = Alloc(size_t(keys * dr));
  pool_.ParallelFor(
      keys,
      [&](int64_t b0, int64_t e0, int) {
        for (int64_t j = b0; j < e0; ++j) {
          float* x = X + j * r;
          float* kp = KP + j * dr;
          if (C.type() == DType::kF32) {
            std::memcpy(x, C.Row(j), size_t(r) * 4);
            std::memcpy(kp, KPE.Row(j), size_t(dr) * 4);
          } else {
            std::fill(x, x + r, 0.0f);
            std::fill(kp, kp + dr, 0.0f);
            cpu::KvAxpy(1.0f, C.Row(j), C.type(), x, r);
            cpu::KvAxpy(1.0f, KPE.Row(j), KPE.type(), kp, dr);
          }
        }
      },
      16);
  // KV: [keys, H (dn + dv)] = X · kv_bᵀ; head h of key j: K_nope at KV + j·kvw + h (dn + dv), its
  // V right after (kv_b's rows per head: Wuk[h] then Wuv[h]).
  float* KV = Alloc(size_t(keys * kvw));
  MatMul(X, keys, r, kvb, nullptr, KV, kvw);
  // Attention per (head, block of 4 rows), head-major so that a thread's consecutive items
  // reuse the head's keys and values from cache. Per key, DotRows / AxpyRows load the key and
  // value rows once for the block's 4 query rows. Row t sees keys 0 .. pos0 + t: the block runs
  // to its last row's keys, and a key past a row's own gets weight 0 there (an exact +0, so a
  // row's values do not depend on the rows it shares a block with).
  constexpr int64_t kRows = 4;
  static_assert(kRows == kScoreRows[kMlaPrefillScores],
                "Scores(kMlaPrefillScores) holds kRows rows");
  const int64_t blocks = (T + kRows - 1) / kRows;
  pool_.ParallelFor(H * blocks, [&](int64_t begin, int64_t end, int) {
    std::vector<float>& p = Scores(kMlaPrefillScores);
    thread_local std::vector<float> qn;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t h = u / blocks, t0 = (u % blocks) * kRows, nr = std::min(kRows, T - t0);
      const int64_t n_ctx = s.pos0 + t0 + nr;  // the block's last row's keys
      // The block's queries packed: nope parts [nr, dn], rope parts [nr, dr].
      qn.resize(size_t(kRows * (dn + dr)));
      float* qnope = qn.data();
      float* qpe = qn.data() + kRows * dn;
      for (int64_t i = 0; i < nr; ++i) {
        const float* qr = q + (s.row0 + t0 + i) * qw + h * (dn + dr);
        std::memcpy(qnope + i * dn, qr, size_t(dn) * 4);
        std::memcpy(qpe + i * dr, qr + dn, size_t(dr) * 4);
      }
      p.resize(size_t(kRows * n_ctx));
      float mx[kRows], inv[kRows];
      for (int64_t i = 0; i < nr; ++i) mx[i] = -INFINITY;
      for (int64_t j = 0; j < n_ctx; ++j) {
        float sn[kRows], sp[kRows];
        cpu::DotRows(qnope, dn, nr, KV + j * kvw + h * (dn + dv), dn, sn);
        cpu::DotRows(qpe, dr, nr, KP + j * dr, dr, sp);
        for (int64_t i = 0; i < nr; ++i) {
          const float v = (sn[i] + sp[i]) * scale;
          p[size_t(i * n_ctx + j)] = v;
          if (j <= s.pos0 + t0 + i) mx[i] = std::max(mx[i], v);
        }
      }
      float* o[kRows];
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t vis = s.pos0 + t0 + i + 1;  // keys row i sees
        float* pi = &p[size_t(i * n_ctx)];
        float sum = 0;
        for (int64_t j = 0; j < vis; ++j) sum += (pi[j] = std::exp(pi[j] - mx[i]));
        for (int64_t j = vis; j < n_ctx; ++j) pi[j] = 0.0f;
        inv[i] = 1.0f / sum;
        o[i] = y + (s.row0 + t0 + i) * H * dv + h * dv;
        std::fill(o[i], o[i] + dv, 0.0f);
      }
      // Output rows of the block are H·dv apart in y.
      for (int64_t j = 0; j < n_ctx; ++j) {
        float w[kRows];
        for (int64_t i = 0; i < nr; ++i) w[i] = p[size_t(i * n_ctx + j)] * inv[i];
        cpu::AxpyRows(w, KV + j * kvw + h * (dn + dv) + dn, o[0], H * dv, nr, dv);
      }
    }
  });
  Release(X, size_t(keys * r));
  Release(KP, size_t(keys * dr));
  Release(KV, size_t(keys * kvw));
}

// Column blocks of an expert projection with `cols` outputs when `active` experts run at once on
// `threads` threads: enough items to keep every thread busy (about 4 a thread), blocks of whole
// 64 columns (the kernels' groups of 8 and tasks of 32 stay whole), one block per expert when the
// experts alone are enough, or when the weight is repacked (whole matrices only).
int64_t ExpertColumnBlocks(int64_t cols, int64_t active, int threads, bool packed) {
  if (packed || active <= 0) return 1;
  const int64_t want = (4 * int64_t(threads) + active - 1) / active;
  return std::clamp<int64_t>(want, 1, std::max<int64_t>(1, cols / 64));
}

// Columns [n0, n1) of block `blk` of `blocks` over `cols` (starts on whole 64s; the last block
// ends at cols; a block may be empty when cols has fewer 64s than blocks).
std::pair<int64_t, int64_t> ColumnBlock(int64_t cols, int64_t blocks, int64_t blk) {
  const auto start = [&](int64_t b) { return b == blocks ? cols : cols * b / blocks / 64 * 64; };
  return {start(blk), start(blk + 1)};
}

namespace {

// The expert weight of node n for expert e, part 0 gate, 1 up, 2 down.
const Tensor& ExpertWeight(const Node& n, const Graph& g, int e, int part) {
  return *g.node(n.src[3 + 3 * size_t(e) + size_t(part)]).weight;
}

// Every expert of a projection has the projection's shape and the first expert's type (one
// error naming the tensor, before any kernel runs on a pool thread).
// EL: the experts this node holds (all, or a head split's range).
void CheckExpertWeights(const Node& n, const Graph& g, int64_t D, int64_t I, int EL) {
  const int E = EL;
  for (int part = 0; part < 3; ++part) {
    const Tensor& first = ExpertWeight(n, g, 0, part);
    const Shape want = part == 2 ? Shape{D, I} : Shape{I, D};
    for (int e = 0; e < E; ++e) {
      const Tensor& t = ExpertWeight(n, g, e, part);
      ES_CHECK(t.shape == want && t.dtype == first.dtype, "cpu backend: expert weight '", t.name,
               "' is ", Name(t.dtype), " ", ShapeStr(t.shape), ", expected ", Name(first.dtype),
               " ", ShapeStr(want), " (the experts of one projection share one type and shape)");
    }
    ES_CHECK(cpu::MatMulSupports(first.dtype) && (part == 2 ? I : D) % BlockElems(first.dtype) == 0,
             "cpu backend: no matmul kernel for expert weight '", first.name, "' of type ",
             Name(first.dtype), " ", ShapeStr(first.shape));
  }
}

}  // namespace

// The routing of one MoE node's R rows, and the R·K (row, j) entries compacted per expert.
struct CpuBackend::ExpertRows {
  std::vector<int32_t> chosen;         // [R, K] expert of each row's j-th choice
  std::vector<float> weights;          // [R, K] its weight
  std::vector<int64_t> count, offset;  // [EL + 1] compacted rows per local expert, where they start
  std::vector<int64_t> entry;          // [R K] compacted row → its (row · K + j)
  std::vector<int64_t> pos_of;         // [R K] (row · K + j) → its compacted row (-1: not here)
  std::vector<int> active;  // experts with rows, most rows first (longest items start first)
};

CpuBackend::ExpertRows CpuBackend::RouteRows(const MoeParams& p, const float* x, int64_t R,
                                             int64_t D, const Tensor& router, const float* bias,
                                             int e0, int EL) {
  const int E = p.n_experts, K = p.top_k;
  ExpertRows er;
  // Routing (router logits in f32, as transformers does even for f64 models).
  std::vector<float> logits(size_t(R * E));
  MatMul(x, R, D, router, nullptr, logits.data(), E);
  er.chosen.resize(size_t(R * K));
  er.weights.resize(size_t(R * K));
  pool_.ParallelFor(
      R,
      [&](int64_t b0, int64_t e0, int) {
        for (int64_t r = b0; r < e0; ++r)
          ref::MoeRoute(&logits[size_t(r * E)], bias, p, &er.chosen[size_t(r * K)],
                        &er.weights[size_t(r * K)]);
      },
      16);
  // Rows compacted per expert: counts, offsets, and the (row, j) entry of each compacted row.
  // Choices as local experts (-1: outside the range, added by another device).
  for (int32_t& c : er.chosen) c = c >= e0 && c < e0 + EL ? c - e0 : -1;
  er.count.assign(size_t(EL) + 1, 0);
  er.offset.assign(size_t(EL) + 1, 0);
  for (int64_t i = 0; i < R * K; ++i)
    if (er.chosen[size_t(i)] >= 0) ++er.count[size_t(er.chosen[size_t(i)])];
  for (int e = 0; e < EL; ++e)
    er.offset[size_t(e) + 1] = er.offset[size_t(e)] + er.count[size_t(e)];
  er.entry.resize(size_t(R * K));
  er.pos_of.assign(size_t(R * K), -1);
  std::vector<int64_t> fill(er.offset.begin(), er.offset.end() - 1);
  for (int64_t i = 0; i < R * K; ++i) {
    if (er.chosen[size_t(i)] < 0) continue;
    const int64_t at = fill[size_t(er.chosen[size_t(i)])]++;
    er.entry[size_t(at)] = i;
    er.pos_of[size_t(i)] = at;
  }
  for (int e = 0; e < EL; ++e)
    if (er.count[size_t(e)] > 0) er.active.push_back(e);
  std::stable_sort(er.active.begin(), er.active.end(),
                   [&](int a, int b) { return er.count[size_t(a)] > er.count[size_t(b)]; });
  return er;
}

void CpuBackend::ExpertFfns(const Node& n, const Graph& g, const ExpertRows& er, int64_t D,
                            int64_t I, const float* xs, float* act, float* dn) {
  const int64_t A = int64_t(er.active.size());
  auto weight = [&](int e, int part) -> const Tensor& { return ExpertWeight(n, g, e, part); };
  bool packed = false;
  for (int e : er.active) packed = packed || FindPacked(weight(e, 0)) || FindPacked(weight(e, 2));
  // Gate and up of every active expert in one parallel region: items (expert, column block),
  // SwiGLU applied to the block's outputs in place.
  const int64_t bu = ExpertColumnBlocks(I, A, pool_.size(), packed);
  ForEachItem(A * bu, [&](int64_t item, ThreadPool& serial) {
    const int e = er.active[size_t(item / bu)];
    const auto [n0, n1] = ColumnBlock(I, bu, item % bu);
    const int64_t m = er.count[size_t(e)], nc = n1 - n0;
    if (nc <= 0) return;
    const float* xe = xs + er.offset[size_t(e)] * D;
    thread_local std::vector<float> gt, up;
    gt.resize(size_t(m * nc));
    up.resize(size_t(m * nc));
    MatMulCols(xe, m, D, weight(e, 0), n0, n1, gt.data(), nc, serial);
    MatMulCols(xe, m, D, weight(e, 1), n0, n1, up.data(), nc, serial);
    float* ae = act + er.offset[size_t(e)] * I;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < nc; ++c) {
        const float gv = gt[size_t(i * nc + c)];
        ae[i * I + n0 + c] = gv / (1.0f + std::exp(-gv)) * up[size_t(i * nc + c)];
      }
  });
  // Down of every active expert in one parallel region: items (expert, column block of D).
  const int64_t bd = ExpertColumnBlocks(D, A, pool_.size(), packed);
  ForEachItem(A * bd, [&](int64_t item, ThreadPool& serial) {
    const int e = er.active[size_t(item / bd)];
    const auto [n0, n1] = ColumnBlock(D, bd, item % bd);
    if (n1 <= n0) return;
    MatMulCols(act + er.offset[size_t(e)] * I, er.count[size_t(e)], I, weight(e, 2), n0, n1,
               dn + er.offset[size_t(e)] * D + n0, D, serial);
  });
}

void CpuBackend::CombineExperts(const ExpertRows& er, int64_t R, int64_t D, int K, const float* dn,
                                float* y, const float* res) {
  // Threaded over rows, or over columns for a single row; each row's sum is independent of the
  // batch.
  const int64_t cb = R >= pool_.size() ? 1 : (D + 255) / 256;
  pool_.ParallelFor(R * cb, [&](int64_t b0, int64_t e0, int) {
    for (int64_t u = b0; u < e0; ++u) {
      const int64_t r = u / cb, c0 = D * (u % cb) / cb, c1 = D * (u % cb + 1) / cb;
      float* yr = y + r * D;
      std::fill(yr + c0, yr + c1, 0.0f);
      for (int j = 0; j < K; ++j) {
        if (er.pos_of[size_t(r * K + j)] < 0) continue;  // another device's expert
        const float w = er.weights[size_t(r * K + j)];
        const float* o = dn + er.pos_of[size_t(r * K + j)] * D;
        for (int64_t i = c0; i < c1; ++i) yr[i] += w * o[i];
      }
      // The fused residual add (the add's sum: IEEE addition commutes exactly).
      if (res)
        for (int64_t i = c0; i < c1; ++i) yr[i] += res[r * D + i];
    }
  });
}

void CpuBackend::MoE(const Node& n, const Graph& g, const float* x, int64_t R, float* y,
                     const float* res) {
  const MoeOpParams& mp = n.Params<MoeOpParams>();
  const MoeParams& p = mp.moe;
  const int64_t D = g.node(n.src[0]).shape[1];
  const Tensor& router = *g.node(n.src[1]).weight;
  const float* bias = n.src[2] >= 0 ? F32(g.node(n.src[2]).weight) : nullptr;
  // E experts routed over; EL of them held here (an expert range: a head split's shard, arch.h
  // ArchShard).
  const int E = p.n_experts, K = p.top_k, EL = int(mp.LocalExperts()), e0 = int(mp.FirstExpert());
  const int64_t I = p.ffn_dim;
  ES_CHECK(int64_t(n.src.size()) == 3 + 3 * int64_t(EL) && e0 >= 0 && e0 + EL <= E,
           "cpu backend: moe '", n.name, "' has ", n.src.size(), " inputs for experts [", e0, ", ",
           e0 + EL, ") of ", E);
  CheckExpertWeights(n, g, D, I, EL);
  const ExpertRows er = RouteRows(p, x, R, D, router, bias, e0, EL);
  const int64_t M = er.offset[size_t(EL)];
  moe_bytes_ = double(router.nbytes);
  for (int e : er.active)
    for (int part = 0; part < 3; ++part) moe_bytes_ += double(ExpertWeight(n, g, e, part).nbytes);
  // xs: [M, D] the compacted rows; act: [M, I] silu(gate)·up; dn: [M, D] the experts' outputs.
  float* xs = Alloc(size_t(M * D));
  float* act = Alloc(size_t(M * I));
  float* dn = Alloc(size_t(M * D));
  pool_.ParallelFor(
      M,
      [&](int64_t b0, int64_t e0, int) {
        for (int64_t i = b0; i < e0; ++i)
          std::memcpy(xs + i * D, x + (er.entry[size_t(i)] / K) * D, size_t(D) * 4);
      },
      8);
  ExpertFfns(n, g, er, D, I, xs, act, dn);
  CombineExperts(er, R, D, K, dn, y, res);
  Release(xs, size_t(M * D));
  Release(act, size_t(M * I));
  Release(dn, size_t(M * D));
}

namespace {

// Every row's position lies inside the cache and inside its sequence's mapped KV blocks.
void CheckPositions(const Batch& b, const CpuKv& kv) {
  for (int64_t t = 0; t < b.n_tokens(); ++t) {
    const BatchSeq& s = b.seqs[size_t(b.row_seq[size_t(t)])];
    ES_CHECK(b.positions[size_t(t)] < kv.capacity(), "sequence in slot ", s.slot,
             " exceeds the context of ", kv.capacity(), " tokens");
    ES_CHECK(b.positions[size_t(t)] < kv.mapped_tokens(s.slot), "sequence in slot ", s.slot,
             " position ", b.positions[size_t(t)], " has no KV block (the slot's table maps ",
             kv.mapped_tokens(s.slot), " tokens)");
  }
}

// --profile's op family: the node's name with "layers.N." made "layers.*." (one line for all
// layers) and its op.
std::string FamilyKey(const Node& n) {
  std::string key = n.name;
  if (const size_t at = key.find("layers."); at != std::string::npos) {
    size_t e = at + 7;
    while (e < key.size() && std::isdigit(static_cast<unsigned char>(key[e]))) ++e;
    key.replace(at + 7, e - at - 7, "*");
  }
  return key + " (" + OpName(n.op) + ")";
}

}  // namespace

void CpuBackend::Embed(const Tensor& E, const Batch& b, int64_t cols, float* y) {
  const int64_t T = b.n_tokens();
  for (int64_t t = 0; t < T; ++t)
    ES_CHECK(b.tokens[size_t(t)] >= 0 && b.tokens[size_t(t)] < E.rows(), "token id ",
             b.tokens[size_t(t)], " is outside the vocabulary (", E.rows(), " tokens)");
  pool_.ParallelFor(T, [&](int64_t b0, int64_t e0, int) {
    for (int64_t t = b0; t < e0; ++t) {
      const void* row = E.bytes() + size_t(b.tokens[size_t(t)]) * E.row_bytes();
      if (IsQuantized(E.dtype))
        Dequantize(E.dtype, row, y + t * cols, cols);
      else
        ConvertRowToF32(E.dtype, row, y + t * cols, cols);
    }
  });
}

namespace {

// One row of RMSNorm: y = w · x / rms(x), cols values (the kRmsNorm node's).
void NormRow(const float* xr, const float* w, float eps, int64_t cols, float* y) {
  double ss = 0;
  for (int64_t k = 0; k < cols; ++k) ss += double(xr[k]) * xr[k];
  const float inv = float(1.0 / std::sqrt(ss / double(cols) + eps));
  for (int64_t k = 0; k < cols; ++k) y[k] = w[k] * (xr[k] * inv);
}

// Rope node n's rotation of one row v (cols values, in place) at position `pos`; cs and sn:
// scratch of the table's dim / 2 floats (the kRope node's and a rotating store's).
void RotateRow(const RopeParams& rp, int64_t pos, float* v, float* cs, float* sn) {
  const RopeTable& rt = *rp.table;
  const int64_t H = rp.heads, hd = rp.head_dim, off = rp.offset, half = rt.dim / 2;
  for (int64_t k = 0; k < half; ++k) {
    const float angle = float(pos) * rt.inv_freq[size_t(k)];
    cs[k] = std::cos(angle) * rt.attention_factor;
    sn[k] = std::sin(angle) * rt.attention_factor;
  }
  for (int64_t h = 0; h < H; ++h) {
    float* vh = v + h * hd + off;
    for (int64_t k = 0; k < half; ++k) {
      float* a = rt.mode == RopeMode::kNeox ? vh + k : vh + 2 * k;
      float* c = rt.mode == RopeMode::kNeox ? vh + k + half : vh + 2 * k + 1;
      const float x0 = *a, x1 = *c;
      *a = x0 * cs[k] - x1 * sn[k];
      *c = x1 * cs[k] + x0 * sn[k];
    }
  }
}

// silu(g) · u: the kSwiGLU node's arithmetic, and a fused gate/up's epilogue's.
inline float SwiGLU(float g, float u) { return g / (1.0f + std::exp(-g)) * u; }

}  // namespace

void CpuBackend::RmsNorm(const float* x, const float* w, float eps, int64_t rows, int64_t cols,
                         float* y) {
  pool_.ParallelFor(rows, [&](int64_t b0, int64_t e0, int) {
    for (int64_t r = b0; r < e0; ++r) NormRow(x + r * cols, w, eps, cols, y + r * cols);
  });
}

void CpuBackend::Rope(const Node& n, const Batch& b, const float* x, int64_t rows, int64_t cols,
                      float* y) {
  const RopeParams& rp = n.Params<RopeParams>();
  const size_t half = size_t(rp.table->dim / 2);
  std::memcpy(y, x, size_t(rows * cols) * 4);
  pool_.ParallelFor(rows, [&](int64_t b0, int64_t e0, int) {
    std::vector<float> cs(half), sn(half);
    for (int64_t r = b0; r < e0; ++r)
      RotateRow(rp, b.positions[size_t(r)], y + r * cols, cs.data(), sn.data());
  });
}

void CpuBackend::FusedMatMul(int i, const Graph& g, const FusionPlan& f,
                             const std::vector<float*>& buf, float* y) {
  const Node& n = g.node(i);
  const int gi = f.gate_node[size_t(i)], ui = f.up_node[size_t(i)];
  const bool dual = gi >= 0;
  const Tensor& W = *g.node(n.src[1]).weight;  // dual: gate and up, one type and shape
  ES_ASSERT(f.norm_of[size_t(i)] < 0);         // CpuFusionCaps folds no norm
  const int ri = f.res_node[size_t(i)];
  const float* x = buf[size_t(n.src[0])];
  const float* res = ri >= 0 ? buf[size_t(ri)] : nullptr;
  const float* bias =
      !dual && n.src.size() > 2 && n.src[2] >= 0 ? F32(g.node(n.src[2]).weight) : nullptr;
  const int64_t R = n.shape[0], N = n.shape[1], K = W.cols();
  if (dual) {
    // gate into y, up into `up`, one region per kernel phase (x quantized once); each block of
    // outputs becomes the kSwiGLU node's result in place, by the thread that computed it.
    const Tensor& Wg = *g.node(g.node(gi).src[1]).weight;
    const Tensor& Wu = *g.node(g.node(ui).src[1]).weight;
    float* up = Alloc(size_t(R * N));
    const cpu::MatMulEpilogue swiglu = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) y[r * N + c] = SwiGLU(y[r * N + c], up[r * N + c]);
    };
    if (FindPacked(Wg) || FindPacked(Wu)) {
      // Repacked weights: the two matmuls, then the SwiGLU as the node's region.
      MatMul(x, R, K, Wg, nullptr, y, N);
      MatMul(x, R, K, Wu, nullptr, up, N);
      pool_.ParallelFor(
          N, [&](int64_t c0, int64_t c1, int) { swiglu(0, R, c0, c1); }, 1024);
    } else {
      cpu::MatMulPairEpi(x, R, K, Wg.data, Wu.data, W.dtype, N, y, up, N, swiglu, pool_);
    }
    Release(up, size_t(R * N));
  } else if (res) {
    // The residual added to each block of outputs by the thread that computed it (IEEE addition
    // commutes exactly: the add node's bits).
    const cpu::MatMulEpilogue add = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) y[r * N + c] += res[r * N + c];
    };
    MatMul(x, R, K, W, bias, y, N, &add);
  } else {
    MatMul(x, R, K, W, bias, y, N);
  }
}

void CpuBackend::RopeStore(int i, const Graph& g, const FusionPlan& f, const Batch& b, CpuKv& kv,
                           const std::vector<float*>& buf) {
  const Node& n = g.node(i);
  const Node& rope = g.node(f.rope_of[size_t(i)]);
  const RopeParams& rp = rope.Params<RopeParams>();
  const float* x = buf[size_t(rope.src[0])];
  const int64_t cols = n.shape[1];
  const int part = n.Params<KvStoreParams>().part;
  ES_ASSERT(cols == kv.spec().width[part]);
  const size_t half = size_t(rp.table->dim / 2);
  // Each row rotated in scratch (the kRope node's arithmetic) and stored; rows write distinct
  // cache rows.
  pool_.ParallelFor(b.n_tokens(), [&](int64_t t0, int64_t t1, int) {
    std::vector<float> row(static_cast<size_t>(cols)), cs(half), sn(half);
    for (int64_t t = t0; t < t1; ++t) {
      std::memcpy(row.data(), x + t * cols, size_t(cols) * 4);
      RotateRow(rp, b.positions[size_t(t)], row.data(), cs.data(), sn.data());
      const BatchSeq& s = b.seqs[size_t(b.row_seq[size_t(t)])];
      cpu::KvStoreRow(row.data(), cols, kv.spec().dtype,
                      kv.Rows(s.slot, n.layer, part).Row(b.positions[size_t(t)]));
    }
  });
}

void CpuBackend::RunFused(int i, const Graph& g, const FusionPlan& f, const Batch& b, CpuKv& kv,
                          const std::vector<float*>& buf, float* y) {
  const Node& n = g.node(i);
  if (n.op == Op::kKvStore) return RopeStore(i, g, f, b, kv, buf);
  if (n.op == Op::kMoE) {
    ES_ASSERT(f.norm_of[size_t(i)] < 0);  // CpuFusionCaps folds no norm into it
    return MoE(n, g, buf[size_t(n.src[0])], n.shape[0], y, buf[size_t(f.res_node[size_t(i)])]);
  }
  FusedMatMul(i, g, f, buf, y);
}

void CpuBackend::RunNode(const Node& n, const Graph& g, const Batch& b, CpuKv& kv,
                         const std::vector<float*>& buf, float* y) {
  const int64_t rows = n.shape[0], cols = n.shape[1];
  auto in = [&](int k) { return buf[size_t(n.src[size_t(k)])]; };
  auto w = [&](int k) -> const Tensor& { return *g.node(n.src[size_t(k)]).weight; };
  switch (n.op) {
    case Op::kEmbed:
      Embed(w(0), b, cols, y);
      break;
    case Op::kRmsNorm:
      RmsNorm(in(0), F32(&w(1)), n.Params<RmsNormParams>().eps, rows, cols, y);
      break;
    case Op::kMatMul: {
      const Tensor& W = w(1);
      const float* bias = n.src[2] >= 0 ? F32(g.node(n.src[2]).weight) : nullptr;
      MatMul(in(0), rows, W.cols(), W, bias, y, cols);
      break;
    }
    case Op::kAdd: {
      const float *a = in(0), *c = in(1);
      for (int64_t k = 0; k < rows * cols; ++k) y[k] = a[k] + c[k];
      break;
    }
    case Op::kSwiGLU: {
      const float *gt = in(0), *up = in(1);
      pool_.ParallelFor(
          rows * cols,
          [&](int64_t b0, int64_t e0, int) {
            for (int64_t k = b0; k < e0; ++k) y[k] = SwiGLU(gt[k], up[k]);
          },
          1024);
      break;
    }
    case Op::kSlice: {
      const float* x = in(0);
      const int64_t xc = g.node(n.src[0]).shape[1];
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(y + r * cols, x + r * xc + n.Params<SliceParams>().col0, size_t(cols) * 4);
      break;
    }
    case Op::kRope:
      Rope(n, b, in(0), rows, cols, y);
      break;
    case Op::kKvStore: {
      const float* x = in(0);
      const int part = n.Params<KvStoreParams>().part;
      ES_ASSERT(cols == kv.spec().width[part]);
      for (int64_t t = 0; t < b.n_tokens(); ++t) {
        const BatchSeq& s = b.seqs[size_t(b.row_seq[size_t(t)])];
        cpu::KvStoreRow(x + t * cols, cols, kv.spec().dtype,
                        kv.Rows(s.slot, n.layer, part).Row(b.positions[size_t(t)]));
      }
      break;
    }
    case Op::kAttention:
      Attention(n, b, kv, in(0), y);
      break;
    case Op::kMlaAttention:
      Mla(n, g, b, kv, in(0), y);
      break;
    case Op::kMoE:
      MoE(n, g, in(0), rows, y);
      break;
    case Op::kGetRows: {
      const float* x = in(0);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(y + r * cols, x + int64_t(b.out_rows[size_t(r)]) * cols, size_t(cols) * 4);
      break;
    }
    case Op::kInput:
      std::memcpy(y, InputRows(b, n), size_t(rows * cols) * 4);
      break;
    case Op::kWeight:
    case Op::kCount:
      break;
  }
}

namespace {

// What plan f folded into node i, for --profile's family names ("" when nothing): e.g.
// "+rms_norm+add" for a matmul with its norm and residual.
std::string FusedOps(const FusionPlan& f, size_t i) {
  std::string s;
  if (f.norm_of[i] >= 0) s += "+rms_norm";
  if (f.gate_node[i] >= 0) s += "+gate+swiglu";
  if (f.res_node[i] >= 0) s += "+add";
  if (f.rope_of[i] >= 0) s += "+rope";
  return s;
}

// Whether plan f folded anything into node i (RunFused runs it).
bool Fused(const FusionPlan& f, size_t i) {
  return f.norm_of[i] >= 0 || f.out_node[i] >= 0 || f.rope_of[i] >= 0;
}

// dies[i]: the buffers whose last reader is node i — the graph's last uses, extended where a fused
// node reads a folded node's input (live_until) and moved to where a fused output is written
// (write_at: an add's output is written by its matmul, earlier).
std::vector<std::vector<int>> BufferDeaths(const Graph& g, const FusionPlan& f) {
  const std::vector<int> last = g.LastUse();
  std::vector<std::vector<int>> dies(last.size());
  for (size_t s = 0; s < last.size(); ++s)
    dies[size_t(std::max(last[s], f.live_until[s]))].push_back(int(s));
  return dies;
}

}  // namespace

void CpuBackend::ProfileNode(const Node& n, const Graph& g, const Batch& b, const CpuKv& kv,
                             bool decode, double dt, ComputeStats* stats, const FusionPlan& plan,
                             size_t i) {
  if (stats) stats->ops.push_back({n.name, n.op, dt});
  std::string key = FamilyKey(n);
  key.insert(key.size() - 1, FusedOps(plan, i));
  Family& f = profile_[decode ? 0 : 1].fam[key];
  f.s += dt;
  f.bytes += NodeBytes(n, g, b, kv);
  if (const int gi = plan.gate_node[i]; gi >= 0 && gi != int(i))  // the dual GEMV's gate
    f.bytes += NodeBytes(g.node(gi), g, b, kv);
  ++f.count;
}

void CpuBackend::Run(const Graph& g, const Batch& b, KvStorage& kv_base, float* out, int32_t* ids,
                     ComputeStats* stats) {
  auto& kv = dynamic_cast<CpuKv&>(kv_base);
  const auto& nodes = g.nodes();
  // The plain graph is the plan with nothing fused.
  const FusionPlan plan = fuse_ ? PlanFusions(g, cpu::CpuFusionCaps()) : FusionPlan(g);
  const std::vector<std::vector<int>> dies = BufferDeaths(g, plan);
  std::vector<float*> buf(nodes.size(), nullptr);
  std::vector<size_t> buf_n(nodes.size(), 0);
  // Every buffer still held goes back to the pool when Compute ends, also when a check throws
  // in the middle (a bad position, a non-finite logit): the pool owns them and frees them.
  struct ReleaseHeld {
    CpuBackend* self;
    std::vector<float*>& buf;
    std::vector<size_t>& buf_n;
    ~ReleaseHeld() {
      for (size_t i = 0; i < buf.size(); ++i)
        if (buf_n[i]) self->Release(buf[i], buf_n[i]);
    }
  } release_held{this, buf, buf_n};
  const auto t_start = Clock::now();
  const int64_t T = b.n_tokens();
  const bool decode = T == int64_t(b.seqs.size());  // one row per sequence
  CheckPositions(b, kv);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op == Op::kWeight) continue;
    const auto t0 = Clock::now();
    float* y = nullptr;
    if (plan.skip[i]) {
      // Folded into another node: nothing to run (a fused add's or SwiGLU's output is written by
      // its matmul, at plan.write_at).
    } else if (n.op == Op::kKvStore) {
      buf[i] = buf[size_t(n.src[0])];  // passes its input through (for ordering)
    } else {
      const size_t o = size_t(plan.out_node[i] >= 0 ? plan.out_node[i] : int(i));
      buf_n[o] = size_t(nodes[o].shape[0] * nodes[o].shape[1]);
      y = buf[o] = Alloc(buf_n[o]);
    }
    if (!plan.skip[i]) {
      if (Fused(plan, i))
        RunFused(int(i), g, plan, b, kv, buf, y);
      else
        RunNode(n, g, b, kv, buf, y);
    }
    // Free the buffers whose last reader this was.
    for (int s : dies[i])
      if (buf_n[size_t(s)] && size_t(s) != nodes.size() - 1) {
        Release(buf[size_t(s)], buf_n[size_t(s)]);
        buf_n[size_t(s)] = 0;
      }
    if (opts_.profile && !plan.skip[i])
      ProfileNode(n, g, b, kv, decode, std::chrono::duration<double>(Clock::now() - t0).count(),
                  stats, plan, i);
  }
  const size_t on = size_t(g.output());
  if (out)
    std::memcpy(out, buf[on], buf_n[on] * 4);
  else
    ArgmaxRowsHost(buf[on], nodes[on].shape[0], nodes[on].shape[1], ids, &pool_);
  const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  if (opts_.profile) {
    PhaseProfile& pp = profile_[decode ? 0 : 1];
    ++pp.runs;
    pp.rows += T;
    pp.total_s += total_s;
  }
  if (stats) {
    stats->total_s = total_s;
    stats->shader_s = stats->total_s;
  }
}

double CpuBackend::NodeBytes(const Node& n, const Graph& g, const Batch& b, const CpuKv& kv) const {
  auto w = [&](int k) -> const Tensor& { return *g.node(n.src[size_t(k)]).weight; };
  switch (n.op) {
    case Op::kMatMul:
      return double(w(1).nbytes);
    case Op::kEmbed:
      return double(b.n_tokens()) * double(w(0).row_bytes());
    case Op::kMoE:
      return moe_bytes_;
    case Op::kMlaAttention:
    case Op::kAttention: {  // the absorbed pair (MLA), then each row's keys, whole cache rows once
      double bytes = 0;
      if (n.op == Op::kMlaAttention) {  // WukT (its Q8_0 copy) and Wuv (kv_b's V rows)
        const Tensor* kvb = MlaKvB(g, n);
        const double dn = double(n.Params<MlaParams>().dn), dv = double(n.Params<MlaParams>().dv);
        bytes = double(QWeight(w(3)).nbytes) +
                (kvb ? double(kvb->nbytes) * dv / (dn + dv) : double(w(4).nbytes));
      }
      const double row =
          double(RowBytes(kv.spec().dtype, kv.spec().width[0]) +
                 (kv.spec().width[1] ? RowBytes(kv.spec().dtype, kv.spec().width[1]) : 0));
      for (int64_t t = 0; t < b.n_tokens(); ++t) bytes += double(b.positions[size_t(t)] + 1) * row;
      return bytes;
    }
    default:
      return 0;
  }
}

void CpuBackend::PrintProfile() const {
  const char* names[2] = {"decode (1 row per sequence)", "prefill and mixed steps"};
  for (int ph = 0; ph < 2; ++ph) {
    const PhaseProfile& pp = profile_[ph];
    if (pp.runs == 0) continue;
    const double k = 1e3 / double(pp.runs);  // ms per step
    double bytes = 0, op_s = 0;
    for (const auto& [name, f] : pp.fam) {
      bytes += f.bytes;
      op_s += f.s;
    }
    std::fprintf(stderr,
                 "cpu profile, %s: %lld steps (%lld rows), per step %.2f ms (ops %.2f ms), reads "
                 "%.1f MB: %.1f GB/s\n",
                 names[ph], static_cast<long long>(pp.runs), static_cast<long long>(pp.rows),
                 pp.total_s * k, op_s * k, bytes / 1e6 / double(pp.runs),
                 pp.total_s > 0 ? bytes / pp.total_s / 1e9 : 0.0);
    std::vector<std::pair<double, std::string>> fam;
    for (const auto& [name, f] : pp.fam) fam.push_back({f.s, name});
    std::sort(fam.rbegin(), fam.rend());
    std::fprintf(stderr, "  %-56s %9s %6s %9s %8s %6s\n", "op family (layers merged)", "ms/step",
                 "share", "MB/step", "GB/s", "n/step");
    for (const auto& [s, name] : fam) {
      const Family& f = pp.fam.at(name);
      std::fprintf(stderr, "  %-56s %9.3f %5.1f%% %9.2f %8.1f %6.1f\n", name.c_str(), f.s * k,
                   op_s > 0 ? 100.0 * f.s / op_s : 0.0, f.bytes / 1e6 / double(pp.runs),
                   f.s > 0 ? f.bytes / f.s / 1e9 : 0.0, double(f.count) / double(pp.runs));
    }
  }
}

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& opts, std::optional<bool> fuse) {
  return std::make_unique<CpuBackend>(opts, fuse.value_or(true));
}

}  // namespace es
