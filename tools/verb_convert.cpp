// `edgeseek convert HF_DIR | --synthetic PRESET -o OUT.gguf --type TYPE [--policy FILE]`:
// writes a GGUF file that llama.cpp loads (src/formats/gguf_convert.cpp), tensors quantized by
// policy, with a progress line on stderr when it is a terminal (core/progress.h) and one summary
// line at the end.
// --synthetic writes a random-weight model of a preset so that llama.cpp and edgeseek can bench
// the very same file. Either way tensors are streamed (read or made, re-encoded, written a slice
// at a time): peak memory is a slice plus the mmapped input's resident pages, not the model.

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/progress.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/runtime/model.h"
#include "verb.h"

namespace es::tools {
namespace {

namespace fs = std::filesystem;

struct ConvertArgs {
  std::string in, synthetic, out, type, policy, tokenizer;
  int threads = 0;
  uint64_t seed = 0;
};

int Run(const ConvertArgs& a) {
  ES_CHECK(a.in.empty() != a.synthetic.empty(),
           "convert: give either HF_DIR or --synthetic PRESET");
  ES_CHECK(!a.out.empty(), "convert: give the output file with -o OUT.gguf");
  if (a.type.empty() && a.policy.empty()) Fail("convert: give --type or --policy");
  const QuantPolicy policy =
      a.policy.empty() ? BuiltinQuantPolicy(a.type) : LoadQuantPolicy(a.policy);
  std::shared_ptr<Model> m;  // folders only: synthetic weights are made as they are written
  ConvertModelOptions o;
  if (!a.synthetic.empty()) {
    o.tokenizer_dir = a.tokenizer;
  } else {
    std::error_code ec;
    const bool onnx = fs::path(a.in).extension() == ".onnx";
    ES_CHECK(fs::is_directory(a.in, ec) || (onnx && fs::is_regular_file(a.in, ec)), "convert: '",
             a.in,
             "' is not a Hugging Face model folder, nor an .onnx file or a folder holding one");
    m = Model::Load(a.in);  // an ONNX model is lifted into the same tensors a folder gives
    const std::string folder = onnx ? fs::path(a.in).parent_path().string() : a.in;
    o.tokenizer_dir = !a.tokenizer.empty()                              ? a.tokenizer
                      : fs::exists(fs::path(folder) / "tokenizer.json") ? folder
                                                                        : "";
  }
  if (!o.tokenizer_dir.empty() && fs::is_regular_file(o.tokenizer_dir))
    o.tokenizer_dir = fs::path(o.tokenizer_dir).parent_path().string();
  o.quantize.threads = a.threads;
  std::unique_ptr<Progress> bar;  // made at the first report, which knows the total
  o.quantize.progress = [&bar](uint64_t done, uint64_t total, const std::string& tensor) {
    if (!bar) bar = std::make_unique<Progress>("converting", total, Progress::Unit::kBytes);
    bar->Set(done, tensor);
  };
  const GgufQuantizeStats st = m ? ConvertModelToGguf(*m, a.out, policy, o)
                                 : ConvertSyntheticToGguf(a.synthetic, a.seed, a.out, policy, o);
  bar.reset();  // the progress line erased before the summary
  std::string types;
  for (const auto& [t, n] : st.out_types)
    types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(Name(t));
  std::fprintf(
      stderr, "converted %s -> %s (%s): %zu tensors (%s), %.1f MB -> %.1f MB in %.2f s%s\n",
      a.in.empty() ? ("synthetic " + a.synthetic).c_str() : a.in.c_str(), a.out.c_str(),
      policy.name.c_str(), st.tensors, types.c_str(), double(st.in_bytes) / 1e6,
      double(st.out_bytes) / 1e6, st.seconds, o.tokenizer_dir.empty() ? ", no tokenizer" : "");
  return 0;
}

VerbRun Setup(CLI::App& sub) {
  auto a = std::make_shared<ConvertArgs>();
  sub.add_option("input", a->in, "Hugging Face model folder, .onnx file or ONNX model folder");
  sub.add_option("--synthetic", a->synthetic, "built-in preset or config.json: random weights");
  sub.add_option("-o,--output", a->out, "output GGUF file")->required();
  AddQuantTypeOptions(sub, a->type, a->policy, a->threads,
                      "f32, f16, bf16, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
  sub.add_option("--tokenizer", a->tokenizer, "tokenizer folder (default: the model folder's)");
  sub.add_option("--seed", a->seed, "seed of synthetic weights");
  return [a] { return Run(*a); };
}

const VerbRegistrar kReg("convert",
                         "write a Hugging Face folder, an ONNX model or a synthetic model as GGUF",
                         Setup);

}  // namespace
}  // namespace es::tools
