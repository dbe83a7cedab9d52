// Options shared by the model verbs (-m / --synthetic / --backend / -t / --device) and helpers
// to load a model into a Runner.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/runtime/model.h"
#include "edgeseek/runtime/runner.h"

namespace es::tools {

struct ModelArgs {
  std::string model;
  std::string synthetic;
  std::string backend = "cpu";
  std::string device;
  std::string dtype;  // empty: bf16 synthetic weights, a folder's own types; else see Add()
  std::string tokenizer;
  int threads = 0;
  int context = 0;
  uint64_t seed = 0;
  bool profile = false;

  void Add(CLI::App& app, bool allow_synthetic = true);
  std::shared_ptr<Model> Load() const;
  std::unique_ptr<Runner> MakeRunner(std::shared_ptr<Model> m, int n_slots = 1) const;
};

// "1,2,3" -> ids; throws es::Error naming the bad item.
std::vector<int32_t> ParseIds(const std::string& s);

}  // namespace es::tools
