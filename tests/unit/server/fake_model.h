// Test doubles for the server and the engine: FakeStepModel (a deterministic "model" with a
// paged "KV cache" of token ids: its logits are a hash of the whole token history read back
// through the slot's block table, so any KV or block bookkeeping error — a block shared that
// should not be, written while shared, evicted while in use, a wrong table — changes the
// output) and FakeTextModel (bytes as tokens, a ChatML-like template).
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/server/server.h"

namespace es::test {

class FakeStepModel : public StepModel {
 public:
  static constexpr int kVocab = 258;  // bytes, 256 = EOS, 257 = spare
  FakeStepModel(int slots, int64_t context, double step_sleep_s = 0, int eos_bias = -100);
  int vocab_size() const override { return kVocab; }
  int n_slots() const override { return int(used_.size()); }
  int64_t context() const override { return context_; }
  size_t kv_bytes_per_token() const override { return 1024; }
  int AcquireSlot() override;
  void ReleaseSlot(int slot) override;
  int64_t kv_blocks() const override;
  bool paged_kv() const override { return true; }
  void SetBlockTable(int slot, const std::vector<int32_t>& blocks) override;
  // A pool of `n` blocks instead of slots x context (before the engine is built).
  void set_kv_blocks(int64_t n);
  bool batch_invariant() const override { return !variant_; }
  // stats: a made-up split (upload 1 us per token, dispatch 2 us, shader 3 us per token,
  // download 4 us per output row) so tests can follow it into traces.
  void Forward(const Batch& batch, std::vector<float>* logits, ComputeStats* stats) override;
  // Makes it behave like a backend that is not batch-invariant: every cached token also keeps
  // a trace of the batch it was computed in (its token count and sequences), and the logits
  // depend on it, so the same request gives other tokens under other loads.
  void set_batch_variant(bool v) { variant_ = v; }
  // Asks for Engine::Warm, and then lets a slot compute positions again or out of order (as a
  // real KV cache does: Warm runs each shape through several tails on scratch positions).
  void set_warm_up(bool v) { warm_ = v; }
  bool warm_up() const override { return warm_; }
  // Makes it claim device sampling (as the Vulkan backend): the engine then sends sampled and
  // constrained rows through ForwardSample (StepModel's: Forward, then SampleRowHost).
  void set_device_sampling(bool v) { device_sampling_ = v; }
  bool device_sampling() const override { return device_sampling_; }
  void ForwardSample(const Batch& batch, const std::vector<RowSampling>& rows,
                     std::vector<int32_t>* ids, ComputeStats* stats) override;
  // ForwardSample's rows so far that carried an allow-mask.
  int64_t masked_rows() const;

  // Observed per Forward: tokens and sequences in the batch, decodes (1-token seqs).
  struct StepLog {
    int tokens, seqs, singles;
  };
  std::vector<StepLog> log() const;
  int used_slots() const;

 private:
  mutable std::mutex mu_;
  // The pool: per block and row, the token id cached there (-1: never written) and its batch
  // mark (variant_).
  std::vector<int32_t> cells_;
  std::vector<uint32_t> marks_;
  std::vector<std::vector<int32_t>> tables_;  // per slot
  std::vector<int64_t> length_;               // per slot: positions computed so far
  bool variant_ = false, warm_ = false, device_sampling_ = false;
  int64_t masked_rows_ = 0;
  std::vector<bool> used_;
  int64_t context_;
  double sleep_s_;
  int eos_bias_;
  std::vector<StepLog> log_;
};

class FakeTextModel : public TextModel {
 public:
  explicit FakeTextModel(std::string generation_prompt_suffix = "")
      : suffix_(std::move(generation_prompt_suffix)) {}
  std::vector<int32_t> Encode(const std::string& text, bool add_special) const override;
  std::string RenderChat(const nlohmann::json& messages, const nlohmann::json& tools,
                         const nlohmann::json& kwargs) const override;
  std::unique_ptr<TokenTextStream> NewStream() const override;
  std::vector<int32_t> eos_ids() const override { return {256}; }
  bool has_reasoning_tags() const override { return !suffix_.empty(); }
  // Ids 0..255 are their byte; EOS and the spare id have none.
  std::shared_ptr<const grammar::TokenTrie> token_trie() const override;
  // Tool calls in the Hermes form (Qwen's): <tool_call>{json}</tool_call>.
  std::string chat_template_source() const override { return "{{ '<tool_call>' }}"; }

 private:
  std::string suffix_;
};

// A server config on an ephemeral port with one model "tiny" (4 slots of 256 tokens) and small
// limits (64 KiB bodies, 64 tokens), for the HTTP tests to adjust.
ServerConfig TinyServerConfig();

// A loader that gives every ModelEntry a FakeTextModel and one FakeStepModel per instance
// (batch_variant: models that are not batch-invariant, like a GPU backend).
ModelBuilder FakeLoader(double step_sleep_s = 0.002, std::string suffix = "", int eos_bias = -100,
                        bool batch_variant = false);

// A server listening with its models loaded (FakeLoader(0): no step delay) and a client to it.
struct LoadedServer {
  std::unique_ptr<Server> srv;
  std::unique_ptr<httplib::Client> cli;
  explicit LoadedServer(ServerConfig c = TinyServerConfig()) {
    srv = std::make_unique<Server>(std::move(c), FakeLoader(0));
    srv->Listen();
    srv->LoadModels();
    cli = std::make_unique<httplib::Client>("127.0.0.1", srv->port());
    cli->set_read_timeout(20, 0);
  }
  // POSTs body as JSON; the reply parsed (discarded on a parse error), its status in *status
  // (-1: no reply).
  nlohmann::json Post(const std::string& path, const nlohmann::json& body, int* status) {
    auto res = cli->Post(path.c_str(), body.dump(), "application/json");
    *status = res ? res->status : -1;
    return res ? nlohmann::json::parse(res->body, nullptr, false) : nlohmann::json();
  }
};

}  // namespace es::test
