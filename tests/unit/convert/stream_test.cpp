// Streaming convert and load (issue 16): synthetic weights made a slice at a time
// (src/runtime/synthetic_weights.cpp) are the bytes the whole-tensor generator made; `convert`,
// `quantize` and quantize-at-load write what the converter wrote before streaming (checksums
// recorded from it); and their peak memory stays near one tensor, not the model.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/formats/gguf_quantize.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/models/presets.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/runtime/model.h"
#include "runtime/synthetic_weights.h"
#include "test_util.h"

namespace es {
namespace {

std::string Golden(const std::string& name) {
  return test::SourceDir() + "/tests/golden/data/models/" + name + "/config.json";
}

// DeepSeek-V2-shaped (MLA + 32 experts, one dense layer), 131M parameters (265 MB of bf16) whose
// largest tensors (embedding, output: 8192 x 1024, 16 MB of bf16) span several streaming slices.
constexpr const char* kStreamConfig =
    R"({"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
 "vocab_size": 8192, "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 3,
 "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_attention_heads": 8, "num_key_value_heads": 8,
 "q_lora_rank": null, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
 "n_routed_experts": 32, "n_shared_experts": 1, "moe_intermediate_size": 512, "num_experts_per_tok": 4,
 "n_group": 1, "topk_group": 1, "topk_method": "greedy", "scoring_func": "softmax", "norm_topk_prob": false,
 "routed_scaling_factor": 1.0, "rms_norm_eps": 1e-06, "max_position_embeddings": 4096, "rope_theta": 10000.0,
 "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": false})";

std::string WriteStreamConfig(const std::string& dir) {
  const std::string path = dir + "/stream_v2.json";
  test::WriteFile(path, kStreamConfig);
  return path;
}

uint64_t Fnv1a(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}
uint64_t FileFnv(const std::string& path) {
  const std::string s = test::ReadFile(path);
  return Fnv1a(s.data(), s.size());
}

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// ---- The weights.

// Tensor i of `sw` made element by element from the reference (SyntheticWeights::Value), rounded
// by the scalar conversions of half.h.
std::string ReferenceBytes(const SyntheticWeights& sw, size_t i) {
  const Tensor& t = sw.tensors()[i];
  std::string out(t.nbytes, '\0');
  for (int64_t e = 0; e < t.numel(); ++e) {
    const float v = sw.Value(i, e);
    if (t.dtype == DType::kF32) {
      std::memcpy(&out[size_t(e) * 4], &v, 4);
    } else {
      const uint16_t h = t.dtype == DType::kF16 ? F32ToF16(v) : F32ToBF16(v);
      std::memcpy(&out[size_t(e) * 2], &h, 2);
    }
  }
  return out;
}

TEST(SyntheticWeights, SimdBytesAreTheReferenceOnAnyPoolAndRowRange) {
  ThreadPool pool1(1), pool3(3);
  for (const char* model : {"dsv2_lite", "dsv3", "llama3", "qwen2_tied"}) {
    const ModelConfig c = LoadHfConfig(Golden(model));
    for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      const uint64_t seed = uint64_t(dtype) * 7 + 1;
      const SyntheticWeights sw(c, dtype, seed);
      ASSERT_EQ(sw.tensors().size(), ExpectedWeights(c).size());
      for (size_t i = 0; i < sw.tensors().size(); ++i) {
        const std::string want = ReferenceBytes(sw, i);
        const Tensor got = sw.Make(i, i % 2 ? pool1 : pool3);
        ASSERT_EQ(got.dtype, sw.tensors()[i].dtype) << model << " " << got.name;
        ASSERT_EQ(got.nbytes, want.size()) << got.name;
        ASSERT_EQ(Bytes(got.data, got.nbytes), want)
            << model << " " << Name(dtype) << " " << got.name;
        // Odd row ranges (inside one piece of the pool's split or across two) and single
        // elements at odd offsets, where the SIMD body and the scalar tail meet.
        const int64_t rows = got.rows();
        const int64_t r0 = rows / 3, r1 = std::min(rows, r0 + 7);
        std::vector<uint8_t> slice(size_t(r1 - r0) * got.row_bytes());
        sw.Fill(i, r0, r1, slice.data(), pool3);
        ASSERT_EQ(Bytes(slice.data(), slice.size()),
                  want.substr(size_t(r0) * got.row_bytes(), slice.size()))
            << got.name << " rows " << r0 << ".." << r1;
        const size_t es = RowBytes(got.dtype, 1);
        for (const int64_t b : {int64_t(1), got.numel() / 2 + 3, got.numel() - 5}) {
          const int64_t e = std::min(got.numel(), b + 37);
          if (b < 0 || b >= e) continue;
          std::vector<uint8_t> part(size_t(e - b) * es);
          sw.FillElements(i, b, e, part.data());
          ASSERT_EQ(Bytes(part.data(), part.size()), want.substr(size_t(b) * es, part.size()))
              << got.name << " elements " << b << ".." << e;
        }
      }
    }
  }
}

TEST(SyntheticWeights, ValuesHaveThePresetScaleAndTensorsDiffer) {
  // Matrices uniform on +-sqrt(3 / fan_in) (variance 1 / fan_in), norms 1 +- 0.1; two tensors
  // of the same shape share no long run of values (neither copies nor shifted copies).
  const ModelConfig c = LoadHfConfig(Golden("llama3"));
  const SyntheticWeights sw(c, DType::kF32, 0);
  ThreadPool pool(2);
  Tensor prev;  // the tensor before, made
  for (size_t i = 0; i < sw.tensors().size(); ++i) {
    const Tensor t = sw.Make(i, pool);
    const float* v = static_cast<const float*>(t.data);
    const int64_t n = t.numel();
    const bool norm = sw.specs()[i].is_norm;
    const double center = norm ? 1.0 : 0.0;
    const double half = norm ? 0.1 : std::sqrt(3.0 / double(t.shape.back()));
    double sum = 0, sq = 0, lo = 1e30, hi = -1e30;
    for (int64_t e = 0; e < n; ++e) {
      sum += v[e] - center;
      sq += (v[e] - center) * (v[e] - center);
      lo = std::min(lo, double(v[e]));
      hi = std::max(hi, double(v[e]));
    }
    EXPECT_GE(lo, center - half * 1.000001) << t.name;
    EXPECT_LT(hi, center + half * 1.000001) << t.name;
    if (n >= 4096) {
      const double var = half * half / 3;
      EXPECT_NEAR(sum / double(n), 0.0, 6 * std::sqrt(var / double(n))) << t.name;
      EXPECT_NEAR(sq / double(n), var, 0.05 * var) << t.name;
      EXPECT_GT(hi - lo, 1.99 * half) << t.name;
    }
    if (prev.data && prev.shape == t.shape && !norm) {
      // The 64 values at the start of this tensor appear nowhere in order in the previous one.
      const float* p = static_cast<const float*>(prev.data);
      int64_t longest = 0;
      for (int64_t e = 0; e + 64 <= n; ++e) {
        int64_t k = 0;
        while (k < 64 && p[e + k] == v[k]) ++k;
        longest = std::max(longest, k);
      }
      EXPECT_LT(longest, 3) << prev.name << " vs " << t.name;
    }
    prev = t;
  }
}

TEST(SyntheticWeights, RecordedValuesAreTheSameOnEveryMachine) {
  // A few elements of the 1.5B preset's weights, recorded on x86-64 (AVX-512) and checked on
  // aarch64 under qemu (scripts/test_arm64.sh): the bits do not depend on the CPU.
  const ModelConfig c = PresetConfig("r1-distill-qwen-1.5b");
  const SyntheticWeights sw(c, DType::kBF16, 0);
  ThreadPool pool(2);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sw.tensors().size(); i += 37) {
    const Tensor& t = sw.tensors()[i];
    const int64_t rows = std::min<int64_t>(t.rows(), 3);
    std::vector<uint8_t> buf(size_t(rows) * t.row_bytes());
    sw.Fill(i, t.rows() - rows, t.rows(), buf.data(), pool);
    h = Fnv1a(buf.data(), buf.size(), h);
  }
  EXPECT_EQ(h, 0x55ba8572a1b2cd50ull);
}

// ---- Files: the checksums (FNV-1a 64 of the
// whole file) were recorded from `edgeseek convert --synthetic CONFIG` and `edgeseek quantize` at
// the counter-based generator's first commit (branch load21; the files the pre-streaming
// converter wrote at commit 771cc0d came from the older splitmix64 weights, which depended on the
// machine's thread count). That streaming writes what the whole-model converter writes is the
// machine-independent twin below.

struct Recorded {
  const char* config;  // golden model name, or "" for kStreamConfig
  const char* name;    // general.name (the config file's stem)
  const char* type;
  uint64_t seed;
  uint64_t fnv;
};

TEST(StreamingConvert, FilesMatchTheRecordedChecksums) {
  const std::string dir = test::TempDir();
  const Recorded kCases[] = {
      {"", "stream_v2", "q4_0", 0,
       0xe3b57d69aa702de8ull},  // slices across the embedding and output rows
      {"llama3", "llama3_cfg", "q4_k_m", 3, 0x268f5c1e7cace8acull},  // q/k rope permutation
      {"dsv2_lite", "config", "bf16", 0, 0x962b5fd238c65064ull},     // copies; stacked experts
      {"dsv3", "config", "q4_k_m", 0, 0x7e635af74c643b00ull},  // mixed types, q LoRA, noaux_tc
  };
  for (const Recorded& r : kCases) {
    const std::string cfg = *r.config ? Golden(r.config) : WriteStreamConfig(dir);
    const ModelConfig c = LoadHfConfig(cfg);
    const SyntheticWeights sw(c, DType::kBF16, r.seed);
    const std::string out = dir + "/" + r.name + "." + r.type + ".gguf";
    ConvertSyntheticWeightsToGguf(sw, c, r.name, out, BuiltinQuantPolicy(r.type), {});
    EXPECT_EQ(FileFnv(out), r.fnv) << (*r.config ? r.config : "stream config") << " " << r.type;
  }
  // `quantize` of the bf16 file above.
  const std::string req = dir + "/req.gguf";
  QuantizeGguf(dir + "/config.bf16.gguf", req, BuiltinQuantPolicy("q4_k_m"));
  EXPECT_EQ(FileFnv(req), 0x39e210b757418724ull);
}

TEST(StreamingConvert, SyntheticConvertWritesWhatTheWholeModelConvertWrites) {
  // Twin of the checksums: the streaming synthetic convert equals ConvertModelToGguf over
  // Model::Synthetic.
  const std::string dir = test::TempDir();
  for (const char* model : {"dsv2_lite", "llama3"}) {
    for (const char* type : {"q4_0", "bf16"}) {
      LoadOptions lo;
      lo.seed = 5;
      const std::shared_ptr<Model> m = Model::Synthetic(Golden(model), lo);
      ConvertModelToGguf(*m, dir + "/whole.gguf", BuiltinQuantPolicy(type));
      ConvertSyntheticToGguf(Golden(model), 5, dir + "/stream.gguf", BuiltinQuantPolicy(type));
      EXPECT_EQ(test::ReadFile(dir + "/stream.gguf"), test::ReadFile(dir + "/whole.gguf"))
          << model << " " << type;
    }
  }
}

TEST(StreamingConvert, QuantizeAtLoadAsTheWeightsAreMadeEqualsQuantizingTheWholeModel) {
  for (const char* model : {"dsv2_lite", "dsv3", "qwen2_tied"}) {
    for (const char* type : {"q4_0", "q4_k_m", "q8_0"}) {
      LoadOptions lo;
      lo.seed = 2;
      const std::shared_ptr<Model> whole = Model::Synthetic(Golden(model), lo);
      const QuantizeAtLoadStats st = QuantizeModelWeights(*whole, BuiltinQuantPolicy(type), 2);
      EXPECT_GT(st.quantized, 0u);
      lo.quantize = std::make_shared<const QuantPolicy>(BuiltinQuantPolicy(type));
      const std::shared_ptr<Model> streamed = Model::Synthetic(Golden(model), lo);
      ASSERT_EQ(streamed->weights().size(), whole->weights().size());
      for (size_t i = 0; i < whole->weights().size(); ++i) {
        const Tensor& a = *streamed->weights()[i];
        const Tensor& b = *whole->weights()[i];
        ASSERT_EQ(a.name, b.name);
        ASSERT_EQ(a.dtype, b.dtype) << model << " " << type << " " << a.name;
        ASSERT_EQ(Bytes(a.data, a.nbytes), Bytes(b.data, b.nbytes))
            << model << " " << type << " " << a.name;
      }
    }
  }
}

// ---- Peak memory.

// Peak resident memory that fn adds, in bytes, measured in a forked child: the child resets its
// high-water mark (/proc/self/clear_refs "5", Linux >= 4.0), runs fn and reports VmHWM minus its
// VmRSS at the start. -1: fn threw; -2: the high-water mark cannot be reset here.
int64_t ReadStatusKb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size()));
  return -1;
}
int64_t PeakRssGrowth(const std::function<void()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return -2;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    int64_t r = -2;
    if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
      const bool reset = std::fputs("5", f) >= 0;
      if (std::fclose(f) == 0 && reset) {
        const int64_t base = ReadStatusKb("VmRSS:");
        try {
          fn();
          r = (ReadStatusKb("VmHWM:") - base) * 1024;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s\n", e.what());
          r = -1;
        }
      }
    }
    (void)!::write(fds[1], &r, sizeof(r));
    ::_exit(0);
  }
  ::close(fds[1]);
  int64_t r = -2;
  if (::read(fds[0], &r, sizeof(r)) != sizeof(r)) r = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return r;
}

TEST(StreamingConvert, PeakMemoryIsAboutOneTensorNotTheModel) {
  const std::string dir = test::TempDir();
  const std::string cfg = WriteStreamConfig(dir);
  const ModelConfig c = LoadHfConfig(cfg);
  size_t model_bytes = 0, largest = 0;
  const SyntheticWeights sw(c, DType::kBF16, 0);
  for (const Tensor& t : sw.tensors()) {
    model_bytes += t.nbytes;
    largest = std::max(largest, t.nbytes);
  }
  ASSERT_EQ(largest, size_t(16) << 20);
  // A slice of each of source and output, thread scratch, stdio: a fixed 40 MB above 3 tensors.
  const int64_t bound = int64_t(3 * largest) + (int64_t(40) << 20);
  ASSERT_LT(bound, int64_t(model_bytes) / 2);  // far below what holding the model takes

  const int64_t convert = PeakRssGrowth(
      [&] { ConvertSyntheticToGguf(cfg, 0, dir + "/s.gguf", BuiltinQuantPolicy("q4_0")); });
  if (convert == -2) GTEST_SKIP() << "cannot reset the peak RSS here (/proc/self/clear_refs)";
  EXPECT_GT(convert, 0);
  EXPECT_LT(convert, bound) << "streaming convert of a " << model_bytes / 1000000 << " MB model";

  // The probe sees a model held whole: convert through Model::Synthetic (the path `convert
  // --synthetic` took before streaming) peaks near the model's size.
  const int64_t whole = PeakRssGrowth([&] {
    const std::shared_ptr<Model> m = Model::Synthetic(cfg, LoadOptions{});
    ConvertModelToGguf(*m, dir + "/w.gguf", BuiltinQuantPolicy("q4_0"));
  });
  // (Some of the bytes can land in heap pages the child inherited free and resident.)
  EXPECT_GT(whole, int64_t(model_bytes) * 3 / 4) << "the probe does not see a model held whole";

  // Quantize at load keeps the quantized model (q4_0: 9/32 of the bf16 bytes, a little more for
  // the tensors kept or given q8_0) and one slice, not the bf16 model as well.
  const int64_t load = PeakRssGrowth([&] {
    LoadOptions lo;
    lo.quantize = std::make_shared<const QuantPolicy>(BuiltinQuantPolicy("q4_0"));
    const std::shared_ptr<Model> m = Model::Synthetic(cfg, lo);
    size_t kept = 0;
    for (const Tensor* t : m->weights()) kept += t->nbytes;
    ES_CHECK(kept < model_bytes / 2, "weights were not quantized: ", kept, " bytes kept");
  });
  std::printf(
      "peak RSS growth, %.1f MB model: convert %.1f MB, convert of the model held whole %.1f MB, "
      "quantize at load %.1f MB\n",
      double(model_bytes) / 1e6, double(convert) / 1e6, double(whole) / 1e6, double(load) / 1e6);
  EXPECT_GT(load, 0);
  EXPECT_LT(load, int64_t(model_bytes) * 9 / 32 + bound)
      << "quantize-at-load of a " << model_bytes / 1000000 << " MB model";
}

TEST(StreamingConvert, MappedInputsAreHandedBackAsTheyAreWritten) {
  // A folder and a GGUF file of the same 265 MB model: converting the folder and requantizing the
  // bf16 file read every input page, but hand them back slice by slice, so the peak stays near
  // a slice (without that it reaches the input's size: mapped pages count in RSS).
  const std::string dir = test::TempDir();
  const std::string folder = dir + "/stream_v2";
  std::filesystem::create_directories(folder);
  test::WriteFile(folder + "/config.json", kStreamConfig);
  const ModelConfig c = LoadHfConfig(folder + "/config.json");
  size_t largest = 0;
  {
    const SyntheticWeights sw(c, DType::kBF16, 0);
    ThreadPool pool(2);
    std::vector<Tensor> made;
    for (size_t i = 0; i < sw.tensors().size(); ++i) made.push_back(sw.Make(i, pool));
    std::vector<const Tensor*> ts;
    for (const Tensor& t : made) {
      ts.push_back(&t);
      largest = std::max(largest, t.nbytes);
    }
    WriteSafetensors(folder + "/model.safetensors", ts);
  }
  const int64_t bound = int64_t(3 * largest) + (int64_t(40) << 20);

  const int64_t convert = PeakRssGrowth([&] {
    ConvertHfToGguf(folder, dir + "/f.gguf", BuiltinQuantPolicy("q4_0"));
    ConvertHfToGguf(folder, dir + "/f16.gguf", BuiltinQuantPolicy("bf16"));
  });
  if (convert == -2) GTEST_SKIP() << "cannot reset the peak RSS here (/proc/self/clear_refs)";
  const int64_t requantize = PeakRssGrowth(
      [&] { QuantizeGguf(dir + "/f16.gguf", dir + "/q.gguf", BuiltinQuantPolicy("q4_0")); });
  std::printf("peak RSS growth: folder convert %.1f MB, quantize %.1f MB\n", double(convert) / 1e6,
              double(requantize) / 1e6);
  EXPECT_GT(convert, 0);
  EXPECT_LT(convert, bound);
  EXPECT_GT(requantize, 0);
  EXPECT_LT(requantize, bound);
  // The same weights from the folder and made as they are written give the same file, the
  // recorded one.
  ConvertSyntheticWeightsToGguf(SyntheticWeights(c, DType::kBF16, 0), c, "stream_v2",
                                dir + "/s.gguf", BuiltinQuantPolicy("q4_0"), {});
  EXPECT_EQ(test::ReadFile(dir + "/f.gguf"), test::ReadFile(dir + "/s.gguf"));
  EXPECT_EQ(FileFnv(dir + "/s.gguf"), 0xe3b57d69aa702de8ull);  // recorded above
}

}  // namespace
}  // namespace es
