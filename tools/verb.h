// Verb registry for the `edgeseek` CLI. Each verb_*.cpp defines a static VerbRegistrar that adds
// a subcommand: `setup` declares its options on the CLI11 subcommand and returns the function
// that runs it (returning the exit code). Library errors (es::Error) are caught in main and
// printed as one line: "edgeseek: error: <message>", exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace es::tools {

using VerbRun = std::function<int()>;
using VerbSetup = VerbRun (*)(CLI::App& sub);

struct VerbInfo {
  const char* name;
  const char* help;
  VerbSetup setup;
};

std::vector<VerbInfo>& Verbs();

struct VerbRegistrar {
  VerbRegistrar(const char* name, const char* help, VerbSetup setup) {
    Verbs().push_back({name, help, setup});
  }
};

}  // namespace es::tools
