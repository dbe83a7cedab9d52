// `edgeseek` entry point: builds the subcommands from the verb registry, parses, runs.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>

#include "edgeseek/internal/core/error.h"
#include "verb.h"

namespace es::tools {
std::vector<VerbInfo>& Verbs() {
  static std::vector<VerbInfo> verbs;
  return verbs;
}
}  // namespace es::tools

int main(int argc, char** argv) {
  using namespace es::tools;
  CLI::App app{"edgeseek — DeepSeek-family models on edge devices"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "edgeseek 0.1.0");
  auto& verbs = Verbs();
  std::sort(verbs.begin(), verbs.end(),
            [](const VerbInfo& a, const VerbInfo& b) { return std::string(a.name) < b.name; });
  std::vector<std::pair<CLI::App*, VerbRun>> runs;
  try {
    for (auto& v : verbs) {
      CLI::App* sub = app.add_subcommand(v.name, v.help);
      runs.emplace_back(sub, v.setup(*sub));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edgeseek: internal error setting up verbs: %s\n", e.what());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const es::Error& e) {
    std::fprintf(stderr, "edgeseek: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "edgeseek: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edgeseek: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
