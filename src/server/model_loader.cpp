// DefaultModelBuilder: a ModelEntry → es::Model (HF folder or synthetic), its tokenizer and chat
// template (TextModel), and one es::Runner per instance on its backend (StepModel).
#include <algorithm>
#include <filesystem>
#include <mutex>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/pipeline.h"
#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/speculative.h"
#include "edgeseek/internal/runtime/text_pipeline.h"
#include "edgeseek/internal/server/server.h"
#include "edgeseek/internal/tokenizer/chat_template.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"

namespace es {

namespace fs = std::filesystem;

namespace {

class DecoderStream final : public TokenTextStream {
 public:
  explicit DecoderStream(const Tokenizer& t) : dec_(t, /*skip_special=*/true) {}
  std::string Push(int32_t token) override { return dec_.Push(token); }
  std::string Flush() override { return dec_.Flush(); }

 private:
  StreamDecoder dec_;
};

class TokenizerTextModel final : public TextModel {
 public:
  TokenizerTextModel(std::shared_ptr<const Tokenizer> tok, std::shared_ptr<const Model> model,
                     const std::string& name)
      : tok_(std::move(tok)),
        model_(std::move(model)),
        text_(tok_, model_ ? model_->generation().eos_ids : std::vector<int32_t>{}, name) {}
  std::vector<int32_t> Encode(const std::string& text, bool add_special) const override {
    return text_.Encode(text, add_special);
  }
  std::string RenderChat(const nlohmann::json& messages, const nlohmann::json& tools,
                         const nlohmann::json& kwargs) const override {
    ES_CHECK(text_.has_template(), "this model has no chat template; use /v1/completions");
    // Converted with a depth check of their own, not only the request parser's depth limit.
    return text_.RenderChat(ToTemplateInput(messages, "messages"), ToTemplateInput(tools, "tools"),
                            ToTemplateInput(kwargs, "extra variables (chat_template_kwargs)"));
  }
  std::unique_ptr<TokenTextStream> NewStream() const override {
    return std::make_unique<DecoderStream>(*tok_);
  }
  std::vector<int32_t> eos_ids() const override { return text_.eos_ids(); }
  bool has_reasoning_tags() const override { return text_.has_reasoning_tags(); }
  std::string chat_template_source() const override { return text_.template_source(); }
  std::shared_ptr<const grammar::TokenTrie> token_trie() const override {
    std::call_once(trie_once_, [&] {
      std::vector<std::string> bytes(size_t(tok_->vocab_size()));
      for (int32_t id = 0; id < tok_->vocab_size(); ++id)
        if (!tok_->IsSpecial(id)) bytes[size_t(id)] = tok_->TokenBytes(id);
      trie_ = std::make_shared<const grammar::TokenTrie>(std::move(bytes));
    });
    return trie_;
  }

 private:
  mutable std::once_flag trie_once_;
  mutable std::shared_ptr<const grammar::TokenTrie> trie_;
  std::shared_ptr<const Tokenizer> tok_;
  std::shared_ptr<const Model> model_;  // keeps a model-owned tokenizer alive
  ChatText text_;
};

}  // namespace

ModelBuilder DefaultModelBuilder() {
  return [](const ModelEntry& e) {
    LoadOptions lo;
    lo.synthetic = e.synthetic;
    lo.seed = e.seed;
    // As the CLI's --dtype: a dense type is the type of synthetic weights; anything else names a
    // quantization policy applied at load (q8_0, q4_0, q4_k_m, ...), to a folder's weights too.
    bool dense = e.dtype.empty();
    if (!dense) {
      try {
        const DType t = ParseDType(e.dtype);
        dense = t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
      } catch (const Error&) {
      }
    }
    if (dense && !e.dtype.empty()) lo.synthetic_dtype = ParseDType(e.dtype);
    // Quantized tensor by tensor at load (a synthetic model's bf16 form never exists whole).
    if (!e.dtype.empty() && (!dense || e.synthetic.empty())) {
      try {
        lo.quantize = std::make_shared<const QuantPolicy>(BuiltinQuantPolicy(e.dtype));
      } catch (const Error& err) {
        Fail("model '", e.name, "': dtype '", e.dtype, "': ", err.what());
      }
      lo.threads = e.instances.empty() ? 0 : e.instances[0].threads;
    }
    std::shared_ptr<Model> model =
        e.synthetic.empty() ? Model::Load(e.path, lo) : Model::Synthetic(e.synthetic, lo);
    std::shared_ptr<const Tokenizer> tok;
    if (!e.tokenizer.empty()) {
      tok = Tokenizer::Load(e.tokenizer);
    } else if (model->tokenizer()) {
      tok = std::shared_ptr<const Tokenizer>(model, model->tokenizer());
    } else if (!e.synthetic.empty() && fs::is_regular_file(e.synthetic) &&
               fs::exists(fs::path(e.synthetic).parent_path() / "tokenizer.json")) {
      tok = Tokenizer::Load(fs::path(e.synthetic).parent_path().string());
    } else {
      Fail("model '", e.name,
           "' has no tokenizer: give --tokenizer (or \"tokenizer\" in the config)");
    }
    ES_CHECK(tok->vocab_size() <= model->vocab_size(), "model '", e.name, "': the tokenizer has ",
             tok->vocab_size(), " tokens but the model only ", model->vocab_size());
    LoadedModel lm;
    lm.text = std::make_shared<TokenizerTextModel>(tok, model, e.name);
    // The draft model of speculative decoding: loaded once, one Runner (one slot) per instance.
    std::shared_ptr<Model> draft;
    if (!e.draft.empty() && e.draft != "ngram" && e.draft != "mtp") {
      draft = model;
      if (e.draft != "target" || !e.draft_dtype.empty()) {
        LoadOptions dl;
        if (!e.draft_dtype.empty())
          dl.quantize = std::make_shared<const QuantPolicy>(BuiltinQuantPolicy(e.draft_dtype));
        if (e.draft == "target") {
          dl.synthetic = e.synthetic, dl.seed = e.seed, dl.synthetic_dtype = lo.synthetic_dtype;
          draft = e.synthetic.empty() ? Model::Load(e.path, dl) : Model::Synthetic(e.synthetic, dl);
        } else {
          draft = Model::Load(e.draft, dl);
        }
      }
      try {
        CheckSameTokenizer(*model, *draft);
      } catch (const Error& err) {
        Fail("model '", e.name, "': ", err.what());
      }
    }
    for (const InstanceConfig& ic : e.instances) {
      BackendOptions bo;
      bo.threads = ic.threads;
      bo.device = ic.device;
      bo.profile = ic.profile;
      bo.deterministic = ic.deterministic;
      RunnerOptions ro;
      ro.n_slots = ic.slots;
      ro.context = ic.context;
      // The quota sizes the KV pool itself (paged backends): memory is what was asked for,
      // and more short requests than slots x context would allow share it.
      ro.kv_memory_bytes = size_t(std::max(0.0, ic.kv_memory_mb) * 1048576.0);
      if (!ic.kv_type.empty()) ro.kv_dtype = ParseKvType(ic.kv_type);
      SplitOptions so;
      so.devices = ic.devices, so.split = ic.split, so.layer_counts = ic.split_layers;
      auto runner = MakeSplitRunner(model, ic.backend, bo, ro, so);
      Runner& target = *runner;  // the engine owns it, and outlives its drafter
      lm.instances.push_back(WrapRunner(std::move(runner)));
      if (e.draft == "ngram") {
        lm.drafters.push_back(std::make_unique<NgramDrafter>());
      } else if (e.draft == "mtp") {
        try {
          lm.drafters.push_back(std::make_unique<MtpDrafter>(target));
        } catch (const Error& err) {
          Fail("model '", e.name, "': ", err.what());
        }
      } else if (draft) {
        RunnerOptions dro;
        dro.context = lm.instances.back()->context();
        if (!ic.kv_type.empty()) dro.kv_dtype = ParseKvType(ic.kv_type);
        lm.drafters.push_back(std::make_unique<ModelDrafter>(
            std::make_unique<Runner>(draft, CreateBackend(ic.backend, bo), dro),
            int(model->vocab_size())));
      } else {
        lm.drafters.push_back(nullptr);
      }
      lm.instance_names.push_back(ic.backend + (ic.device.empty() ? "" : ":" + ic.device));
    }
    return lm;
  };
}

}  // namespace es
