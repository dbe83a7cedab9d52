// ONNX decoders as es::Models (model_loader.h): the file is read (edgeseek/internal/formats/onnx.h)
// and lifted into a ModelConfig + Hugging Face-named tensors
// (edgeseek/internal/models/onnx_lift.h); the ModelLoader then builds the same ModelArch a Hugging
// Face folder gives. Generation defaults come from what sits beside the file: ORT-GenAI's
// genai_config.json (model.eos_token_id, bos_token_id, context_length), an optimum export's
// config.json / generation_config.json; the tokenizer (and its chat template) from tokenizer.json /
// tokenizer_config.json there.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/formats/onnx.h"
#include "edgeseek/internal/models/onnx_lift.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"
#include "model_loader.h"

namespace es {

namespace fs = std::filesystem;

std::string OnnxModelFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return fs::path(path).extension() == ".onnx" ? path : "";
  const fs::path dir(path);
  if (fs::exists(dir / "genai_config.json")) {
    const nlohmann::json j = json_field::ReadFile((dir / "genai_config.json").string());
    const std::string where = (dir / "genai_config.json").string();
    if (j.contains("model") && j["model"].contains("decoder") &&
        j["model"]["decoder"].contains("filename")) {
      const std::string f = json_field::As<std::string>(j["model"]["decoder"]["filename"],
                                                        "model.decoder.filename", where);
      ES_CHECK(fs::path(f).is_relative() && f.find("..") == std::string::npos, where,
               ": model.decoder.filename '", f, "' is not a file inside the folder");
      return (dir / f).string();
    }
  }
  std::vector<std::string> onnx;
  bool safetensors = false;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".onnx") onnx.push_back(e.path().string());
    if (e.path().extension() == ".safetensors") safetensors = true;
  }
  if (safetensors || onnx.empty()) return "";
  if (onnx.size() > 1) {
    // optimum writes model.onnx (+ decoder_model.onnx / decoder_with_past_model.onnx in old
    // layouts)
    for (const char* pick : {"model.onnx", "decoder_model_merged.onnx"})
      for (const std::string& f : onnx)
        if (fs::path(f).filename() == pick) return f;
    Fail("'", path, "' holds ", onnx.size(), " .onnx files; name one with -m FILE.onnx");
  }
  return onnx[0];
}

std::shared_ptr<Model> LoadOnnxModel(const std::string& onnx_file, const LoadOptions& opts) {
  using json_field::Opt;
  auto m = std::shared_ptr<ModelLoader>(new ModelLoader());
  const fs::path dir = fs::path(onnx_file).parent_path();
  m->name_ = fs::path(onnx_file).stem().string();
  if (m->name_ == "model" && !dir.filename().empty()) m->name_ = dir.filename().string();
  OnnxModelInfo info;
  OnnxLifted lifted = LiftOnnxDecoder(ReadOnnx(onnx_file, &info), onnx_file);
  ModelConfig c = lifted.config;
  // eos / bos / context from the files beside the model.
  auto read_ids = [](const nlohmann::json& v, const std::string& key, const std::string& where) {
    std::vector<int32_t> ids;
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i)
        ids.push_back(json_field::As<int32_t>(v[i], key, where));
    } else if (!v.is_null()) {
      ids.push_back(json_field::As<int32_t>(v, key, where));
    }
    return ids;
  };
  const std::string genai = (dir / "genai_config.json").string(),
                    hfcfg = (dir / "config.json").string();
  if (fs::exists(genai)) {
    const nlohmann::json j = json_field::ReadFile(genai);
    ES_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), genai,
             ": expected a \"model\" object");
    const nlohmann::json& mj = j["model"];
    if (mj.contains("eos_token_id"))
      c.eos_token_ids = read_ids(mj["eos_token_id"], "model.eos_token_id", genai);
    c.bos_token_id = Opt<int32_t>(mj, "bos_token_id", c.bos_token_id, genai);
    c.max_position_embeddings =
        Opt<int64_t>(mj, "context_length", c.max_position_embeddings, genai);
    lifted.notes.push_back("genai_config.json: eos, bos and context length");
  } else if (fs::exists(hfcfg)) {
    const nlohmann::json j = json_field::ReadFile(hfcfg);
    ES_CHECK(j.is_object(), hfcfg, ": expected a JSON object");
    if (j.contains("eos_token_id"))
      c.eos_token_ids = read_ids(j["eos_token_id"], "eos_token_id", hfcfg);
    c.bos_token_id = Opt<int32_t>(j, "bos_token_id", c.bos_token_id, hfcfg);
    c.max_position_embeddings =
        Opt<int64_t>(j, "max_position_embeddings", c.max_position_embeddings, hfcfg);
  }
  m->config_ = std::make_unique<ModelConfig>(c);
  m->owned = std::move(lifted.tensors);
  m->import_notes_ = std::move(lifted.notes);
  m->import_notes_.insert(m->import_notes_.begin(),
                          "onnx: " + onnx_file + " (IR " + std::to_string(info.ir_version) +
                              ", producer " +
                              (info.producer_name.empty() ? "?" : info.producer_name) +
                              (info.producer_version.empty() ? "" : " " + info.producer_version) +
                              (info.external_bytes ? ", external data mapped" : "") + ")");
  if (info.aligned_copies)
    m->import_notes_.insert(m->import_notes_.begin() + 1,
                            "onnx: " + std::to_string(info.aligned_copies) +
                                " initializers at misaligned offsets copied (" +
                                std::to_string(info.aligned_copy_bytes) + " bytes)");
  m->Finish();
  m->ReadGenerationConfig((dir / "generation_config.json").string());
  if (!opts.tokenizer.empty())
    m->tokenizer_ = Tokenizer::Load(opts.tokenizer);
  else if (fs::exists(dir / "tokenizer.json"))
    m->tokenizer_ = Tokenizer::Load(dir.string());
  return m;
}

}  // namespace es
