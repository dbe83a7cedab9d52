// Vulkan test helpers (see vk_util.h).
#include "vk_util.h"

#include <cmath>
#include <cstdlib>

#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es::test {
namespace {
// Validation on unless the environment says otherwise: a process knob (the one instance reads
// it from the environment when it is created), so it is set there, before the instance exists.
const bool kValidationDefault = [] {
  setenv("ES_VK_VALIDATION", "1", 0);
  return true;
}();
// The knobs of ScopedKnobs scopes without a backend, for the backends MakeVulkan creates.
vk::Tuning& ScopeKnobs() {
  static vk::Tuning t;
  return t;
}
}  // namespace

ScopedKnobs::ScopedKnobs(std::initializer_list<std::pair<const char*, std::string>> knobs)
    : saved_(ScopeKnobs()) {
  vk::Tuning t = saved_;
  for (const auto& [name, value] : knobs) t.Set(name, value);
  ScopeKnobs() = t;
}

ScopedKnobs::ScopedKnobs(vk::VulkanBackend& be,
                         std::initializer_list<std::pair<const char*, std::string>> knobs)
    : be_(&be), saved_(be.tuning()) {
  vk::Tuning t = saved_;
  for (const auto& [name, value] : knobs) t.Set(name, value);
  be.Retune(t);
}

ScopedKnobs::~ScopedKnobs() {
  if (be_)
    be_->Retune(saved_);
  else
    ScopeKnobs() = saved_;
}

int AddCachedAttention(Graph& g, int q, int k, int v, int64_t T, int Hq, int Hkv, int dk, int dv,
                       int layer) {
  Node sk = Make(Op::kKvStore, "sk", {k}, {T, int64_t(Hkv) * dk}, layer);
  sk.params = KvStoreParams{0};
  Node sv = Make(Op::kKvStore, "sv", {v}, {T, int64_t(Hkv) * dv}, layer);
  sv.params = KvStoreParams{1};
  const int ks = g.Add(sk), vs = g.Add(sv);
  Node at = Make(Op::kAttention, "attn", {q, ks, vs}, {T, int64_t(Hq) * dv}, layer);
  at.params = AttentionParams{Hq, Hkv, dk, dv, 1.0f / std::sqrt(float(dk))};
  return g.Add(at);
}

vk::VulkanBackend& SharedVulkan() {
  static std::unique_ptr<vk::VulkanBackend> b = MakeVulkan({});
  return *b;
}

std::unique_ptr<vk::VulkanBackend> MakeVulkan(const vk::VulkanTuning& t, bool profile) {
  BackendOptions o;
  o.profile = profile;
  if (const char* d = std::getenv("ES_VK_DEVICE")) o.device = d;
  // Unit tests compare with the reference at f32 tolerances: f32 math unless a test asks for f16
  // (the backend's default is f16 math on devices with cooperative matrices).
  vk::VulkanTuning tt = t;
  tt.knobs = ScopeKnobs().With(t.knobs);
  if (tt.knobs.source(vk::Knob::kF16Act) != vk::KnobSource::kStruct)
    tt.knobs.Set(vk::Knob::kF16Act, "0");
  // ... and the float GEMV (the integer-dot one quantizes x: its own tests ask for it).
  if (tt.knobs.source(vk::Knob::kGemvIdot) != vk::KnobSource::kStruct)
    tt.knobs.Set(vk::Knob::kGemvIdot, "0");
  // Keep the tests' pipeline cache out of the user's home.
  if (tt.knobs.source(vk::Knob::kCacheDir) != vk::KnobSource::kStruct &&
      !std::getenv("ES_VK_CACHE_DIR"))
    tt.knobs.Set(vk::Knob::kCacheDir, BinaryDir() + "/test_tmp/vk_cache");
  return std::make_unique<vk::VulkanBackend>(o, tt);
}

void VulkanTest::SetUp() { messages_ = vk::ValidationMessageCount(); }
void VulkanTest::TearDown() {
  EXPECT_EQ(vk::ValidationMessageCount(), messages_)
      << "validation message: " << vk::LastValidationMessage();
}

Tensor RandomTensor(const std::string& name, DType dtype, Shape shape, uint64_t seed, float scale) {
  Tensor t = AllocTensor(name, dtype, shape);
  const auto v = RandomFloats(size_t(t.numel()), seed, scale);
  if (IsQuantized(dtype)) {  // through the library's quantizer (rows of whole blocks)
    Quantize(dtype, v.data(), MutableData(t), t.numel());
    return t;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::kF32:
        static_cast<float*>(MutableData(t))[i] = v[i];
        break;
      case DType::kF16:
        static_cast<uint16_t*>(MutableData(t))[i] = F32ToF16(v[i]);
        break;
      case DType::kBF16:
        static_cast<uint16_t*>(MutableData(t))[i] = F32ToBF16(v[i]);
        break;
      default:
        ADD_FAILURE() << "RandomTensor: type";
    }
  }
  return t;
}

std::vector<float> Values(const Tensor& t) { return ToF32(t); }

Batch RowsBatch(int T, int64_t pos0, int slot) {
  Batch b;
  std::vector<int32_t> toks(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) toks[size_t(i)] = i;
  b.Add(slot, pos0, toks, true);
  b.Finalize();
  return b;
}

Node Make(Op op, const std::string& name, std::vector<int> src, Shape shape, int layer) {
  Node n;
  n.op = op;
  n.name = name;
  n.src = std::move(src);
  n.shape = std::move(shape);
  n.layer = layer;
  return n;
}

std::shared_ptr<Model> SyntheticModel(const char* config_json, uint64_t seed) {
  const std::string path = TempDir() + "/config.json";
  WriteFile(path, config_json);
  LoadOptions lo;
  lo.seed = seed;
  lo.synthetic_dtype = DType::kBF16;
  return Model::Synthetic(path, lo);
}

const char* const kSmallLlamaConfig = R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
  "vocab_size":131,"hidden_size":128,"intermediate_size":96,"num_hidden_layers":2,
  "num_attention_heads":4,"num_key_value_heads":2,"rms_norm_eps":1e-5,"max_position_embeddings":256,
  "rope_theta":10000.0,"torch_dtype":"bfloat16"})";

std::string SmallDeepseekV2Config(int moe_intermediate) {
  return R"({"architectures":["DeepseekV2ForCausalLM"],
  "model_type":"deepseek_v2","vocab_size":101,"hidden_size":64,"intermediate_size":64,"moe_intermediate_size":)" +
         std::to_string(moe_intermediate) + R"(,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,"q_lora_rank":null,
  "kv_lora_rank":64,"qk_nope_head_dim":16,"qk_rope_head_dim":32,"v_head_dim":16,
  "n_routed_experts":8,"n_shared_experts":1,"num_experts_per_tok":3,"first_k_dense_replace":1,
  "moe_layer_freq":1,"n_group":4,"topk_group":2,"topk_method":"group_limited_greedy",
  "scoring_func":"softmax","norm_topk_prob":false,"routed_scaling_factor":2.0,
  "rms_norm_eps":1e-6,"max_position_embeddings":512,"rope_theta":10000.0,"torch_dtype":"bfloat16"})";
}

const char* const kTinyLlamaConfig = R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
  "vocab_size":131,"hidden_size":48,"intermediate_size":80,"num_hidden_layers":2,
  "num_attention_heads":6,"num_key_value_heads":2,"rms_norm_eps":1e-5,
  "max_position_embeddings":256,"rope_theta":10000.0,"torch_dtype":"bfloat16"})";

const char* const kTinyDeepseekV2Config = R"({"architectures":["DeepseekV2ForCausalLM"],
  "model_type":"deepseek_v2","vocab_size":101,"hidden_size":32,"intermediate_size":64,"moe_intermediate_size":24,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,"q_lora_rank":null,
  "kv_lora_rank":16,"qk_nope_head_dim":8,"qk_rope_head_dim":4,"v_head_dim":8,
  "n_routed_experts":8,"n_shared_experts":1,"num_experts_per_tok":3,"first_k_dense_replace":1,
  "moe_layer_freq":1,"n_group":4,"topk_group":2,"topk_method":"group_limited_greedy",
  "scoring_func":"softmax","norm_topk_prob":false,"routed_scaling_factor":2.0,
  "rms_norm_eps":1e-6,"max_position_embeddings":512,"rope_theta":10000.0,"torch_dtype":"bfloat16"})";

const char* const kTinyDeepseekV3Config = R"({"architectures":["DeepseekV3ForCausalLM"],
  "model_type":"deepseek_v3","vocab_size":89,"hidden_size":32,"intermediate_size":48,"moe_intermediate_size":16,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,"q_lora_rank":24,
  "kv_lora_rank":16,"qk_nope_head_dim":8,"qk_rope_head_dim":4,"v_head_dim":8,
  "n_routed_experts":8,"n_shared_experts":1,"num_experts_per_tok":2,"first_k_dense_replace":1,
  "moe_layer_freq":1,"n_group":2,"topk_group":1,"topk_method":"noaux_tc",
  "scoring_func":"sigmoid","norm_topk_prob":true,"routed_scaling_factor":2.5,
  "rms_norm_eps":1e-6,"max_position_embeddings":512,"rope_theta":10000.0,
  "torch_dtype":"bfloat16"})";

std::vector<int32_t> TestTokens(int n, int seed, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((seed * 7919 + i * 17 + 3) % vocab));
  return t;
}

int AddFfnBlock(Graph& g, int res, int x0, const Tensor& norm, const Tensor& gate, const Tensor& up,
                const Tensor& down, int64_t T, int64_t D, int64_t I) {
  Node nn = Make(Op::kRmsNorm, "norm", {x0, g.AddWeight(norm)}, {T, D});
  nn.params = RmsNormParams{1e-5f};
  const int x = g.Add(nn);
  const int gt = g.Add(Make(Op::kMatMul, "gate", {x, g.AddWeight(gate)}, {T, I}));
  const int u = g.Add(Make(Op::kMatMul, "up", {x, g.AddWeight(up)}, {T, I}));
  const int act = g.Add(Make(Op::kSwiGLU, "act", {gt, u}, {T, I}));
  const int dn = g.Add(Make(Op::kMatMul, "down", {act, g.AddWeight(down)}, {T, D}));
  return g.Add(Make(Op::kAdd, "out", {res, dn}, {T, D}));
}

std::vector<float> RunGraph(Backend& be, const Graph& g, const Batch& b, KvStorage* kv) {
  std::unique_ptr<KvStorage> own;
  if (!kv) {
    own = be.CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 2048);
    kv = own.get();
  }
  const Node& o = g.node(g.output());
  std::vector<float> out(size_t(o.shape[0] * o.shape[1]), NAN);
  be.Compute(g, b, *kv, out.data());
  return out;
}

int Input(Graph& g, const Tensor& table, int T) {
  Node n;
  n.op = Op::kEmbed;
  n.name = table.name + ".in";
  n.src = {g.AddWeight(table)};
  n.shape = {T, table.cols()};
  return g.Add(n);
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (float v : got) ASSERT_TRUE(std::isfinite(v)) << what << ": non-finite output";
  const double e = RelL2(got, want);
  EXPECT_LE(e, tol) << what << ": relative L2 error " << e;
}

}  // namespace es::test
