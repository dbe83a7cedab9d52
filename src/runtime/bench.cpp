// End-to-end benchmark (see bench.h).
#include "edgeseek/internal/runtime/bench.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "edgeseek/internal/backends/vulkan.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/pipeline.h"

namespace es {

using Clock = std::chrono::steady_clock;

size_t ActiveWeightBytes(const Model& m) {
  const ModelConfig& c = m.config();
  double total = 0;
  for (const Tensor* t : m.weights()) {
    double b = double(t->nbytes);
    if (t->name.find(".mlp.experts.") != std::string::npos && c.n_routed_experts > 0)
      b *= double(c.num_experts_per_tok) / c.n_routed_experts;
    // Absorbed MLA weights are read instead of kv_b_proj, which decode never touches.
    if (t->name.find("kv_b_proj") != std::string::npos) b = 0;
    // An untied embedding table gives one row per token; tied, it is read whole as the output.
    if (t == m.arch().embedding() && !c.tie_word_embeddings && t->shape.size() == 2 &&
        t->shape[0] > 0)
      b /= double(t->shape[0]);
    total += b;
  }
  return size_t(total);
}

double MeasureReadBandwidth(int threads, size_t bytes) {
  ThreadPool pool(threads);
  const size_t n = bytes / 8;
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(64, n * 8));
  ES_CHECK(buf, "out of memory for the bandwidth probe");
  pool.ParallelFor(int64_t(n), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) buf[i] = uint64_t(i);
  });
  std::vector<uint64_t> sink(size_t(pool.size()) * 8);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pool.ParallelFor(
        int64_t(n),
        [&](int64_t b, int64_t e, int t) {
          uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
          int64_t i = b;
          for (; i + 8 <= e; i += 8) {
            a0 += buf[i];
            a1 += buf[i + 1];
            a2 += buf[i + 2];
            a3 += buf[i + 3];
            a4 += buf[i + 4];
            a5 += buf[i + 5];
            a6 += buf[i + 6];
            a7 += buf[i + 7];
          }
          for (; i < e; ++i) a0 += buf[i];
          sink[size_t(t) * 8] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
        },
        4096);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(n * 8) / s / 1e9);
  }
  std::free(buf);
  return best;
}

size_t PeakRssBytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return size_t(ru.ru_maxrss) * 1024;
}

namespace {

// Process-wide counters read at each token of a timed pass (decode steps are their differences).
struct ProcessCounters {
  double cpu_s = 0;   // user + system time of all threads
  double wait_s = 0;  // run-queue wait of all threads (/proc/self/task/*/schedstat, field 2)
  long preempt = 0;   // involuntary context switches
  long faults = 0;    // minor + major page faults
};

ProcessCounters ReadProcessCounters() {
  ProcessCounters c;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  c.cpu_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  c.preempt = ru.ru_nivcsw;
  c.faults = ru.ru_minflt + ru.ru_majflt;
  // Threads that ended before this read drop out of the sum; a bench's pool lives throughout.
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string path = std::string("/proc/self/task/") + e->d_name + "/schedstat";
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        unsigned long long run_ns = 0, wait_ns = 0;
        if (std::fscanf(f, "%llu %llu", &run_ns, &wait_ns) == 2) c.wait_s += double(wait_ns) * 1e-9;
        std::fclose(f);
      }
    }
    closedir(d);
  }
  return c;
}

}  // namespace

static double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(idx), hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

namespace {
// One pass of `prompts.size()` sequences: each prompt prefilled alone, then n_new - 1 greedy
// steps of one row a sequence. stats: the prefills' total time and each step's; on_step after
// the prefills and after each step.
void BatchedPass(Runner& runner, const std::vector<std::vector<int32_t>>& prompts, int n_new,
                 const std::function<void()>& on_step, GenerateStats* stats) {
  std::vector<int> slots;
  for (size_t i = 0; i < prompts.size(); ++i) {
    slots.push_back(runner.AcquireSlot());
    ES_CHECK(slots.back() >= 0, "bench --batch ", prompts.size(), ": the runner has ",
             runner.n_slots(), " slots");
  }
  std::vector<int32_t> next(prompts.size()), ids;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    Batch b;
    b.Add(slots[i], 0, prompts[i]);
    b.Finalize();
    runner.ForwardArgmax(b, &ids);
    next[i] = ids.at(0);
  }
  stats->prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (on_step) on_step();
  for (int step = 1; step < n_new; ++step) {
    Batch b;
    for (size_t i = 0; i < prompts.size(); ++i)
      b.Add(slots[i], int64_t(prompts[i].size()) + step - 1, {next[i]});
    b.Finalize();
    const auto s0 = Clock::now();
    runner.ForwardArgmax(b, &ids);
    stats->token_s.push_back(std::chrono::duration<double>(Clock::now() - s0).count());
    next = ids;
    if (on_step) on_step();
  }
  for (int s : slots) runner.ReleaseSlot(s);
}
}  // namespace

namespace {

// The run's description: model, backend (each stage's layers for a layer split), options and
// the model's bytes.
BenchResult DescribeRun(Runner& runner, const BenchOptions& o, double load_s) {
  BenchResult r;
  const Model& m = runner.model();
  r.model = m.name();
  r.backend = runner.backend().name();
  r.backend_desc = runner.backend().description();
  if (!runner.stages().empty()) {
    // A layer split: every stage with its layers, the head's last.
    const std::vector<int>& first = runner.stage_first_layers();
    std::string d;
    for (size_t i = 0; i <= runner.stages().size(); ++i) {
      const int l1 = i + 1 < first.size() ? first[i + 1] : m.config().n_layers;
      d += (l1 > first[i] ? "layers " + std::to_string(first[i]) + "-" + std::to_string(l1 - 1)
                          : std::string("head")) +
           " on " +
           (i < runner.stages().size() ? runner.stages()[i]->description() : r.backend_desc) +
           (i < runner.stages().size() ? " | " : "");
    }
    r.backend_desc = d;
  }
  r.threads = o.threads;
  r.n_prompt = o.n_prompt;
  r.n_gen = o.n_gen;
  r.reps = o.reps;
  r.batch = o.batch;
  r.load_s = load_s;
  r.weight_bytes = m.weight_bytes();
  r.active_bytes_per_token = ActiveWeightBytes(m);
  r.kv_bytes_per_token = runner.kv_bytes_per_token();
  r.kv_type = std::string(Name(runner.kv_type()));
  if (o.drafter) {
    r.spec_drafter = o.drafter->name();
    r.spec_k = o.spec_k;
  }
  return r;
}

// One prompt a sequence (the first is the single-sequence bench's): random tokens from a fixed
// seed, repeating with period prompt_pattern when it is set.
std::vector<std::vector<int32_t>> BenchPrompts(const BenchOptions& o, int vocab_size) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(0, vocab_size - 1);
  std::vector<std::vector<int32_t>> prompts(size_t(o.batch),
                                            std::vector<int32_t>(size_t(std::max(1, o.n_prompt))));
  for (auto& p : prompts)
    for (size_t i = 0; i < p.size(); ++i)
      p[i] = o.prompt_pattern > 0 && i >= size_t(o.prompt_pattern) ? p[i - size_t(o.prompt_pattern)]
                                                                   : dist(rng);
  return prompts;
}

// Runs passes (the prompt, then n_new greedy tokens) and, while `timed`, keeps the per decode
// step counters of each: CPU, run-queue wait, preemptions, faults; each pass's first step.
class BenchPasses {
 public:
  BenchPasses(Runner& runner, const BenchOptions& o)
      : runner_(runner), o_(o), prompts_(BenchPrompts(o, runner.model().vocab_size())) {}

  bool timed = false;
  std::vector<double> step_cpu, step_wait, step_preempt, step_faults, first_steps;

  GenerateStats Pass(int n_new, Drafter* drafter) {
    // Counters at each token: the first comes after the prefill, each later one after a step.
    std::vector<ProcessCounters> at;
    GenerateStats gs;
    if (o_.batch > 1) {
      BatchedPass(runner_, prompts_, n_new,
                  timed ? std::function<void()>([&] { at.push_back(ReadProcessCounters()); })
                        : std::function<void()>(),
                  &gs);
    } else {
      const int slot = runner_.AcquireSlot();
      ES_ASSERT(slot >= 0);
      GenerateOptions go;
      go.max_new_tokens = n_new;
      go.min_new_tokens = go.max_new_tokens;
      go.sampling.temperature = 0;
      go.prefill_chunk = o_.n_prompt;
      go.drafter = drafter;
      go.spec_k = o_.spec_k;
      // Not with drafts: a read costs ~120 us with 9 threads on this CPU (a /proc file a thread),
      // paid once per emitted token, so k + 1 times a speculative step and never in the pair's
      // plain half (untimed): it slowed only the speculative side.
      if (timed && !o_.drafter)
        go.on_token = [&](int32_t) {
          at.push_back(ReadProcessCounters());
          return true;
        };
      Generate(runner_, slot, prompts_[0], go, &gs);
      runner_.ReleaseSlot(slot);
    }
    for (size_t i = 1; i < at.size(); ++i) {
      step_cpu.push_back(at[i].cpu_s - at[i - 1].cpu_s);
      step_wait.push_back(at[i].wait_s - at[i - 1].wait_s);
      step_preempt.push_back(double(at[i].preempt - at[i - 1].preempt));
      step_faults.push_back(double(at[i].faults - at[i - 1].faults));
    }
    if (timed && !gs.token_s.empty()) first_steps.push_back(gs.token_s.front());
    return gs;
  }

  // Decode tokens/s of a pass: every row of every step (speculative steps emit several tokens).
  double DecodeRate(const GenerateStats& gs) const {
    double sum = 0;
    for (double t : gs.token_s) sum += t;
    const double tokens =
        o_.batch > 1 ? double(gs.token_s.size()) * o_.batch : double(gs.decode_tokens);
    return sum > 0 ? tokens / sum : 0.0;
  }

 private:
  Runner& runner_;
  const BenchOptions& o_;
  const std::vector<std::vector<int32_t>> prompts_;
};

// Warm-up passes (page faults of mmapped weights, allocator, caches, a GPU's clocks): at least
// one, more (up to kMaxWarmups) until kMinWarmupS have passed. On a GPU one pass can take 20
// ms, which may not bring an idle device's clocks up: the H200's first bench of a job once read
// 6.2k t/s pp512 where the same file read 25k in later runs. Returns the number of passes.
int WarmUp(BenchPasses& passes, const BenchOptions& o) {
  constexpr double kMinWarmupS = 1.0;
  constexpr int kMaxWarmups = 8;
  const auto warm_t0 = Clock::now();
  int warmups = 0;
  for (int w = 0; w < kMaxWarmups; ++w) {
    passes.Pass(2, nullptr);
    if (o.drafter) passes.Pass(std::min(o.n_gen + 1, 2 + o.spec_k), o.drafter);  // its graphs too
    ++warmups;
    if (std::chrono::duration<double>(Clock::now() - warm_t0).count() >= kMinWarmupS) break;
  }
  return warmups;
}

// The timed repetitions into r's per-run rates and medians (with a drafter: each rep a plain
// pass, then the speculative one, and their ratio).
void TimedReps(BenchPasses& passes, const BenchOptions& o, BenchResult& r) {
  passes.timed = true;
  std::vector<double> token_times, ttfts, ratios, draft_times, verify_times, plain_times;
  for (int rep = 0; rep < o.reps; ++rep) {
    if (o.drafter) {
      // The pair's plain half first; its per-step counters are left out of the step split.
      passes.timed = false;
      const GenerateStats plain = passes.Pass(o.n_gen + 1, nullptr);
      passes.timed = true;
      if (!plain.token_s.empty()) r.plain_decode_runs.push_back(passes.DecodeRate(plain));
      plain_times.insert(plain_times.end(), plain.token_s.begin(), plain.token_s.end());
    }
    const GenerateStats gs = passes.Pass(o.n_gen + 1, o.drafter);
    r.spec.Add(gs.spec);
    for (size_t i = 0; i < gs.draft_s.size(); ++i) {
      draft_times.push_back(gs.draft_s[i]);
      verify_times.push_back(gs.token_s[i] - gs.draft_s[i]);
    }
    if (o.drafter && !gs.token_s.empty() && !r.plain_decode_runs.empty())
      ratios.push_back(passes.DecodeRate(gs) / r.plain_decode_runs.back());
    if (o.n_prompt > 0) r.prefill_runs.push_back(double(o.n_prompt) * o.batch / gs.prefill_s);
    if (!gs.token_s.empty()) r.decode_runs.push_back(passes.DecodeRate(gs));
    token_times.insert(token_times.end(), gs.token_s.begin(), gs.token_s.end());
    ttfts.push_back(gs.prefill_s);
  }
  r.prefill_tokens_per_s = Median(r.prefill_runs);
  r.decode_tokens_per_s = Median(r.decode_runs);
  r.plain_decode_tokens_per_s = Median(r.plain_decode_runs);
  r.spec_speedup = Median(ratios);
  if (o.drafter) {
    r.spec_draft_ms = Median(draft_times) * 1e3;
    r.spec_verify_ms = Median(verify_times) * 1e3;
    r.plain_step_ms = Median(plain_times) * 1e3;
    if (r.spec_verify_ms > 0)
      r.spec_verify_bound = r.spec.tokens_per_step() * r.plain_step_ms / r.spec_verify_ms;
  }
  r.ttft_s = Median(ttfts);
  r.decode_p50_ms = Percentile(token_times, 50) * 1e3;
  r.decode_p95_ms = Percentile(token_times, 95) * 1e3;
  r.decode_p99_ms = Percentile(token_times, 99) * 1e3;
}

// The per decode step counters' percentiles (the timed passes').
void StepSplit(const BenchPasses& passes, BenchResult& r) {
  r.step_cpu_p50_ms = Percentile(passes.step_cpu, 50) * 1e3;
  r.step_cpu_p95_ms = Percentile(passes.step_cpu, 95) * 1e3;
  r.step_wait_p50_ms = Percentile(passes.step_wait, 50) * 1e3;
  r.step_wait_p95_ms = Percentile(passes.step_wait, 95) * 1e3;
  r.step_preempt_p50 = Percentile(passes.step_preempt, 50);
  r.step_preempt_p95 = Percentile(passes.step_preempt, 95);
  r.step_faults_p50 = Percentile(passes.step_faults, 50);
  r.step_faults_p95 = Percentile(passes.step_faults, 95);
  r.first_step_ms = Median(passes.first_steps) * 1e3;
}

// The device's measured bandwidth and the share of it decode reached.
void AddBandwidth(const BenchOptions& o, BenchResult& r) {
  if (r.backend == "vulkan" && MeasureVulkanCopyBandwidth != nullptr) {
    // The device's copy bandwidth (a second, short-lived device handle; 2 x 256 MiB). A device
    // without that much memory to spare just gets no bandwidth line.
    try {
      r.mem_bandwidth_gbs = MeasureVulkanCopyBandwidth(o.device, 256ull << 20) / 1e9;
    } catch (const Error&) {
      r.mem_bandwidth_gbs = 0;
    }
  } else if (r.backend == "cpu") {
    r.mem_bandwidth_gbs = MeasureReadBandwidth(o.threads);
  }
  if (r.mem_bandwidth_gbs > 0) {
    // KV read per decode row: on average the prompt plus half the generated tokens.
    const double kv_read = double(r.kv_bytes_per_token) * (o.n_prompt + o.n_gen / 2.0);
    // A step of `batch` rows reads the weights once and each row's KV.
    const double bytes_per_step = double(r.active_bytes_per_token) + kv_read * o.batch;
    r.decode_bandwidth_fraction =
        bytes_per_step * r.decode_tokens_per_s / o.batch / (r.mem_bandwidth_gbs * 1e9);
  }
}

}  // namespace

BenchResult RunBench(Runner& runner, const BenchOptions& o, double load_s) {
  ES_CHECK(o.n_prompt + o.n_gen <= runner.context(), "bench needs ", o.n_prompt + o.n_gen,
           " tokens of context; the runner has ", runner.context(), " (raise -c)");
  ES_CHECK(o.batch >= 1, "bench --batch must be at least 1");
  ES_CHECK(!o.drafter || o.batch == 1, "bench: speculative decoding takes --batch 1, not ",
           o.batch);
  BenchResult r = DescribeRun(runner, o, load_s);
  BenchPasses passes(runner, o);
  r.warmups = WarmUp(passes, o);
  TimedReps(passes, o, r);
  StepSplit(passes, r);
  r.peak_rss_bytes = PeakRssBytes();
  r.memory = runner.backend().memory();
  AddBandwidth(o, r);
  return r;
}

namespace {
// The backend's pools (BenchResult::memory) as JSON; null where the backend counts none.
nlohmann::json MemoryJson(const BackendMemory& m) {
  if (m.pools.empty()) return nullptr;
  nlohmann::json pools = nlohmann::json::object();
  for (const BackendMemory::Pool& p : m.pools)
    pools[p.name] = {{"bytes", p.peak_bytes},
                     {"used_bytes", p.peak_used_bytes},
                     {"device_local", p.device_local},
                     {"host_visible", p.host_visible}};
  return {{"device_type", m.device_type},
          {"discrete", m.discrete()},
          {"device_local_bytes", m.device_local_peak_bytes},
          {"host_visible_bytes", m.host_visible_peak_bytes},
          {"pools", pools}};
}
}  // namespace

nlohmann::json BenchResult::ToJson() const {
  return {
      {"model", model},
      {"backend", backend},
      {"backend_description", backend_desc},
      {"threads", threads},
      {"n_prompt", n_prompt},
      {"n_gen", n_gen},
      {"repetitions", reps},
      {"batch", batch},
      {"warmup_passes", warmups},
      {"load_s", load_s},
      {"prefill_tokens_per_s", prefill_tokens_per_s},
      {"decode_tokens_per_s", decode_tokens_per_s},
      {"prefill_runs_tokens_per_s", prefill_runs},
      {"decode_runs_tokens_per_s", decode_runs},
      {"ttft_s", ttft_s},
      {"decode_token_ms_p50", decode_p50_ms},
      {"decode_token_ms_p95", decode_p95_ms},
      {"decode_token_ms_p99", decode_p99_ms},
      {"decode_first_step_ms", first_step_ms},
      {"step_cpu_ms_p50", step_cpu_p50_ms},
      {"step_cpu_ms_p95", step_cpu_p95_ms},
      {"step_run_queue_wait_ms_p50", step_wait_p50_ms},
      {"step_run_queue_wait_ms_p95", step_wait_p95_ms},
      {"step_preemptions_p50", step_preempt_p50},
      {"step_preemptions_p95", step_preempt_p95},
      {"step_page_faults_p50", step_faults_p50},
      {"step_page_faults_p95", step_faults_p95},
      {"peak_rss_bytes", peak_rss_bytes},
      {"device_memory", MemoryJson(memory)},
      {"weight_bytes", weight_bytes},
      {"active_weight_bytes_per_token", active_bytes_per_token},
      {"kv_bytes_per_token", kv_bytes_per_token},
      {"kv_type", kv_type},
      {"mem_read_bandwidth_gbs", mem_bandwidth_gbs},
      {"decode_bandwidth_fraction", decode_bandwidth_fraction},
      {"speculative", spec_drafter.empty()
                          ? nlohmann::json(nullptr)
                          : nlohmann::json{{"drafter", spec_drafter},
                                           {"k", spec_k},
                                           {"steps", spec.steps},
                                           {"drafted", spec.drafted},
                                           {"accepted", spec.accepted},
                                           {"acceptance", spec.acceptance()},
                                           {"tokens_per_step", spec.tokens_per_step()},
                                           {"plain_decode_tokens_per_s", plain_decode_tokens_per_s},
                                           {"plain_decode_runs_tokens_per_s", plain_decode_runs},
                                           {"speedup", spec_speedup},
                                           {"draft_ms_p50", spec_draft_ms},
                                           {"verify_ms_p50", spec_verify_ms},
                                           {"plain_step_ms_p50", plain_step_ms},
                                           {"verification_bound", spec_verify_bound}}}};
}

}  // namespace es
