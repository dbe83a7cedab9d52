// Test doubles (fake_model.h).
#include <algorithm>
#include <chrono>
#include <thread>

#include "edgeseek/internal/core/error.h"
#include "fake_model.h"

namespace es::test {

FakeStepModel::FakeStepModel(int slots, int64_t context, double step_sleep_s, int eos_bias)
    : tables_(size_t(slots)),
      length_(size_t(slots), 0),
      used_(size_t(slots), false),
      context_(context),
      sleep_s_(step_sleep_s),
      eos_bias_(eos_bias) {
  set_kv_blocks(StepModel::kv_blocks());
  // Each slot starts on its own blocks, as a backend's paged storage does.
  const int64_t bps = (context + kKvBlockTokens - 1) / kKvBlockTokens;
  for (int s = 0; s < slots; ++s)
    for (int64_t i = 0; i < bps; ++i) tables_[size_t(s)].push_back(int32_t(s * bps + i));
}

void FakeStepModel::set_kv_blocks(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  cells_.assign(size_t(n) * kKvBlockTokens, -1);
  marks_.assign(cells_.size(), 0);
}

int64_t FakeStepModel::kv_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t(cells_.size()) / kKvBlockTokens;
}

void FakeStepModel::SetBlockTable(int slot, const std::vector<int32_t>& blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  ES_CHECK(slot >= 0 && size_t(slot) < used_.size() && used_[size_t(slot)], "fake: table of slot ",
           slot, " not held");
  for (int32_t b : blocks)
    ES_CHECK(b >= 0 && size_t(b) * kKvBlockTokens < cells_.size(), "fake: block ", b,
             " outside the pool");
  tables_[size_t(slot)] = blocks;
}

int FakeStepModel::AcquireSlot() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < used_.size(); ++i)
    if (!used_[i]) {
      used_[i] = true;
      length_[i] = 0;
      return int(i);
    }
  return -1;
}

void FakeStepModel::ReleaseSlot(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  ES_ASSERT(slot >= 0 && size_t(slot) < used_.size() && used_[size_t(slot)]);
  used_[size_t(slot)] = false;
  length_[size_t(slot)] = 0;
}

int FakeStepModel::used_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (bool u : used_) n += u;
  return n;
}

std::vector<FakeStepModel::StepLog> FakeStepModel::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

void FakeStepModel::ForwardSample(const Batch& batch, const std::vector<RowSampling>& rows,
                                  std::vector<int32_t>* ids, ComputeStats* stats) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const RowSampling& r : rows) masked_rows_ += !r.allow.empty();
  }
  StepModel::ForwardSample(batch, rows, ids, stats);
}

int64_t FakeStepModel::masked_rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return masked_rows_;
}

void FakeStepModel::Forward(const Batch& b, std::vector<float>* logits, ComputeStats* stats) {
  if (sleep_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s_));
  std::lock_guard<std::mutex> lock(mu_);
  logits->assign(b.out_rows.size() * kVocab, 0.0f);
  int singles = 0;
  size_t out = 0;
  for (auto& s : b.seqs) {
    ES_CHECK(s.slot >= 0 && size_t(s.slot) < used_.size() && used_[size_t(s.slot)], "fake: slot ",
             s.slot, " not held");
    const auto& table = tables_[size_t(s.slot)];
    auto cell = [&](int64_t pos) -> size_t {
      ES_CHECK(pos >= 0 && size_t(pos / kKvBlockTokens) < table.size(), "fake: slot ", s.slot,
               " position ", pos, " has no block");
      return size_t(table[size_t(pos / kKvBlockTokens)]) * kKvBlockTokens +
             size_t(pos % kKvBlockTokens);
    };
    // A slot computes its positions in order; the engine may start it past 0 on blocks it took
    // from the prefix cache, which must hold tokens there.
    int64_t& len = length_[size_t(s.slot)];
    if (len == 0 || warm_) len = s.pos0;
    ES_CHECK(len == s.pos0, "fake: slot ", s.slot, " holds ", len, " tokens, batch starts at ",
             s.pos0);
    for (int64_t p = 0; p < s.pos0; ++p)
      ES_CHECK(cells_[cell(p)] >= 0, "fake: slot ", s.slot, " position ", p, " was never computed");
    ES_CHECK(s.pos0 + s.n_tokens <= context_, "fake: slot ", s.slot, " overflows its context");
    singles += s.n_tokens == 1;
    for (int i = 0; i < s.n_tokens; ++i) {
      int32_t t = b.tokens[size_t(s.row0 + i)];
      ES_CHECK(t >= 0 && t < kVocab, "fake: token ", t, " outside the vocabulary");
      const int64_t pos = s.pos0 + i;
      cells_[cell(pos)] = t;
      marks_[cell(pos)] = variant_ ? uint32_t(b.n_tokens()) * 977u + uint32_t(b.seqs.size()) : 0;
      ++len;
      if (out < b.out_rows.size() && b.out_rows[out] == s.row0 + i) {
        // Logits: a hash of the whole history, so the output depends on every cached token.
        uint64_t x = 1469598103934665603ull;
        for (int64_t p = 0; p <= pos; ++p) x = (x ^ uint64_t(cells_[cell(p)])) * 1099511628211ull;
        if (variant_)
          for (int64_t p = 0; p <= pos; ++p) x = (x ^ marks_[cell(p)]) * 1099511628211ull;
        float* row = logits->data() + out * kVocab;
        for (int v = 0; v < kVocab; ++v) {
          uint64_t y = (x ^ uint64_t(v) * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
          y ^= y >> 31;
          row[v] = float(y % 10000) / 1000.0f;
        }
        // Printable ASCII only, EOS rarely (eos_bias), never the spare id.
        for (int v = 0; v < 256; ++v)
          if (v < 32 || v > 126) row[v] = -1e9f;
        row[256] += float(eos_bias_);
        row[257] = -1e9f;
        ++out;
      }
    }
  }
  log_.push_back({b.n_tokens(), int(b.seqs.size()), singles});
  if (stats) {
    stats->upload_s = 1e-6 * b.n_tokens();
    stats->dispatch_s = 2e-6;
    stats->shader_s = 3e-6 * b.n_tokens();
    stats->download_s = 4e-6 * double(b.out_rows.size());
    stats->total_s = stats->upload_s + stats->dispatch_s + stats->shader_s + stats->download_s;
  }
}

std::vector<int32_t> FakeTextModel::Encode(const std::string& text, bool) const {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string FakeTextModel::RenderChat(const nlohmann::json& messages, const nlohmann::json&,
                                      const nlohmann::json&) const {
  std::string s;
  for (auto& m : messages)
    s += "<|im_start|>" + m.at("role").get<std::string>() + "\n" +
         m.at("content").get<std::string>() + "<|im_end|>\n";
  return s + "<|im_start|>assistant\n" + suffix_;
}

namespace {
class ByteStream : public TokenTextStream {
 public:
  std::string Push(int32_t t) override {
    if (t >= 256) return {};
    pending_ += char(t);
    // Emit only whole UTF-8 characters.
    size_t n = pending_.size(), i = n;
    while (i > 0 && (static_cast<unsigned char>(pending_[i - 1]) & 0xC0) == 0x80) --i;
    if (i == 0) return {};
    unsigned char lead = static_cast<unsigned char>(pending_[i - 1]);
    size_t need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    size_t cut = (n - (i - 1) >= need) ? n : i - 1;
    std::string out = pending_.substr(0, cut);
    pending_.erase(0, cut);
    return out;
  }
  std::string Flush() override {
    std::string out;
    out.swap(pending_);
    return out;
  }

 private:
  std::string pending_;
};
}  // namespace

std::shared_ptr<const grammar::TokenTrie> FakeTextModel::token_trie() const {
  static const auto trie = [] {
    std::vector<std::string> bytes(FakeStepModel::kVocab);
    for (int b = 0; b < 256; ++b) bytes[size_t(b)] = std::string(1, char(b));
    return std::make_shared<const grammar::TokenTrie>(std::move(bytes));
  }();
  return trie;
}

std::unique_ptr<TokenTextStream> FakeTextModel::NewStream() const {
  return std::make_unique<ByteStream>();
}

ModelBuilder FakeLoader(double step_sleep_s, std::string suffix, int eos_bias, bool batch_variant) {
  return [=](const ModelEntry& e) {
    LoadedModel lm;
    lm.text = std::make_shared<FakeTextModel>(suffix);
    for (auto& ic : e.instances) {
      auto m = std::make_unique<FakeStepModel>(ic.slots, ic.context > 0 ? ic.context : 512,
                                               step_sleep_s, eos_bias);
      // A KV quota sizes the pool, as the real loader's does (1 KiB a token, 16 tokens a block).
      if (ic.kv_memory_mb > 0)
        m->set_kv_blocks(
            std::max<int64_t>(1, int64_t(ic.kv_memory_mb * 1048576.0 / (1024.0 * kKvBlockTokens))));
      m->set_batch_variant(batch_variant);
      lm.instances.push_back(std::move(m));
      lm.instance_names.push_back(batch_variant ? "fake-variant" : "fake");
    }
    return lm;
  };
}

ServerConfig TinyServerConfig() {
  ServerConfig c;
  c.port = 0;
  c.limits.max_body_bytes = 64 * 1024;
  c.limits.max_tokens = 64;
  ModelEntry m;
  m.name = "tiny";
  m.instances = {InstanceConfig{}};
  m.instances[0].slots = 4;
  m.instances[0].context = 256;
  c.models.push_back(m);
  return c;
}

}  // namespace es::test
