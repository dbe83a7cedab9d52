// es_onnx_write: writes a model as an ORT-GenAI-style ONNX file with the test writer
// (onnx_writer_util.h), for measuring import on real sizes (docs/onnx.md, "Measured"):
//
//   es_onnx_write --synthetic r1-distill-qwen-1.5b OUT_DIR   random bf16 weights of a preset,
//                                                            written first as an HF folder
//                                                            (OUT_DIR/hf: config.json,
//                                                            model.safetensors)
//   es_onnx_write HF_DIR OUT_DIR                              an existing folder
//
// OUT_DIR/onnx gets model.onnx + model.onnx.data (external data), genai_config.json, and the
// int4 form: every projection and lm_head as MatMulNBits (Q4_0 rows, block 32), the embedding as
// GatherBlockQuantized. `--f32` writes f32 MatMul weights instead.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/model.h"
#include "onnx_writer_util.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::string synthetic, in, out;
  bool f32 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--synthetic" && i + 1 < argc)
      synthetic = argv[++i];
    else if (a == "--f32")
      f32 = true;
    else if (in.empty() && synthetic.empty())
      in = a;
    else
      out = a;
  }
  if (out.empty() || (in.empty() && synthetic.empty())) {
    std::fprintf(stderr, "usage: es_onnx_write (--synthetic PRESET | HF_DIR) OUT_DIR [--f32]\n");
    return 2;
  }
  try {
    if (!synthetic.empty()) {
      in = out + "/hf";
      fs::create_directories(in);
      const auto m = es::Model::Synthetic(synthetic, {});
      std::ofstream(in + "/config.json") << es::ToHfConfig(m->config()).dump(2);
      es::WriteSafetensors(in + "/model.safetensors", m->weights());
    }
    es::test::OnnxWriteOptions o;
    o.int4 = !f32;
    o.int4_embedding = !f32;
    o.external_data = true;
    es::test::WriteOnnxFromHf(in, out + "/onnx", o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "es_onnx_write: %s\n", e.what());
    return 1;
  }
  return 0;
}
