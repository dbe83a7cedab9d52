// Options shared by the model verbs (-m / --synthetic / --backend / -t / --device) and helpers
// to load a model into a Runner.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/speculative.h"

namespace es::tools {

struct ModelArgs {
  std::string model;
  std::string synthetic;
  std::string backend = "cpu";
  std::string device;
  std::string dtype;  // empty: bf16 synthetic weights, a folder's own types; else see Add()
  std::string tokenizer;
  std::string kv_type;  // --kv-type (ParseKvType); empty: the backend's default
  // Layer split (edgeseek/internal/runtime/pipeline.h): --devices cpu,0 --split layer
  // --split-layers 10,18; under mpirun the ranks split the layers without these.
  std::string devices, split = "layer", split_layers;
  int threads = 0;
  int context = 0;
  uint64_t seed = 0;
  bool profile = false;

  void Add(CLI::App& app, bool allow_synthetic = true);
  std::shared_ptr<Model> Load() const;
  // The runner of these options: one device, the --devices split, or the MPI ranks' split.
  std::unique_ptr<Runner> MakeRunner(std::shared_ptr<Model> m, int n_slots = 1) const;
  BackendOptions MakeBackendOptions() const;
};

// The ModelArgs that Add() declared on subcommand `app` (null if none): under mpirun, main hands
// a worker rank's model to its stage loop through it.
const ModelArgs* ModelArgsOf(const CLI::App* app);

// Speculative decoding options of generate / bench (docs/speculative.md): --draft MODEL (a
// folder, a .gguf or "target": the target's own weights on a second runner), --draft-dtype,
// --spec ngram | mtp, --spec-k K.
struct SpecArgs {
  std::string draft;
  std::string draft_dtype;
  std::string spec;  // "ngram", "mtp" or empty
  int k = 4;

  void Add(CLI::App& app);
  bool enabled() const { return !draft.empty() || !spec.empty(); }
  // The drafter these options ask for (null when none): a draft model is loaded like the target
  // (same backend, device, threads, context, KV type) and checked against it (CheckSameTokenizer);
  // the MTP drafter reads `target_runner`'s hidden states (it must outlive the drafter).
  std::unique_ptr<Drafter> Make(const ModelArgs& target_args, const std::shared_ptr<Model>& target,
                                Runner& target_runner) const;
};

// Where a server listens and who talks to it, shared by `serve` (binds host:port, accepts the
// keys, serves the model under model_name) and `loadtest` (connects there with the first key and
// asks for model_name), so both spell these options the same way.
struct EndpointArgs {
  std::string host;                   // empty: serve's config (127.0.0.1) / loadtest 127.0.0.1
  int port = -1;                      // -1: serve's config (8080) / loadtest 8080
  std::string url;                    // loadtest: full base URL, overrides host and port
  std::string model_name;             // serve --alias, loadtest --model
  std::vector<std::string> api_keys;  // serve: accepted keys; loadtest: the first is sent

  void AddServer(CLI::App& app);  // --host --port --alias --api-key (repeatable)
  void AddClient(CLI::App& app);  // --url --host --port --model --api-key
  std::string BaseUrl() const;    // url, or http://host:port
};

// --kv-type on a verb: f32|f16|q8_0|q4_0 (one parser, ParseKvType: ModelArgs::Load checks it
// first).
void AddKvTypeOption(CLI::App& app, std::string& kv_type);

// "1,2,3" -> ids; throws es::Error naming the bad item.
std::vector<int32_t> ParseIds(const std::string& s);
// Throws es::Error naming the first id that is outside `model`'s vocabulary.
void CheckIds(const std::vector<int32_t>& ids, const Model& model);

// --type / --policy / -t of the verbs that write quantized GGUF files (convert, quantize).
// `type_names` lists the dense types the verb accepts besides the presets.
void AddQuantTypeOptions(CLI::App& app, std::string& type, std::string& policy, int& threads,
                         const std::string& type_names);

}  // namespace es::tools
