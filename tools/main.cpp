// `edgeseek` entry point: builds the subcommands from the verb registry, parses, runs. Under
// mpirun, ranks other than 0 serve rank 0's pipeline stages instead (mpi_stage.h).
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/progress.h"
#include "edgeseek/internal/runtime/mpi_stage.h"
#include "verb.h"

namespace es::tools {
std::vector<VerbInfo>& Verbs() {
  static std::vector<VerbInfo> verbs;
  return verbs;
}
}  // namespace es::tools

namespace {

// A worker rank under mpirun (rank > 0): the verb's model loaded as rank 0 loads it, then the
// stages rank 0 asks for, until it says exit. Its stdout is closed: rank 0 alone writes output.
int RunWorker(const CLI::App* verb) {
  using namespace es::tools;
  std::freopen("/dev/null", "w", stdout);
  // mpirun forwards SIGTERM / SIGINT to every rank; rank 0 drains (serve) and then tells the
  // workers to finish, so they outlive the signal rather than fail rank 0's last steps.
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  const ModelArgs* args = verb ? ModelArgsOf(verb) : nullptr;
  std::shared_ptr<es::Model> model;
  std::string error;
  if (args && (!args->model.empty() || !args->synthetic.empty())) {
    try {
      model = args->Load();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  try {
    es::RunMpiWorker(model, error, args ? args->backend : "cpu",
                     args ? args->MakeBackendOptions() : es::BackendOptions{});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edgeseek (MPI rank %d): error: %s\n", es::MpiRank(), e.what());
    return 1;
  }
  return 0;
}

// Rank 0 under mpirun: the verb's exit code, after the workers were told to finish. A lost rank
// (the server answered 503 and drained) leaves MPI unfinalized and exits at once with code 3:
// MPI_Finalize would wait for the lost rank.
int Finish(int rc) {
  if (es::MpiFinish()) {
    std::fprintf(stderr, "edgeseek: an MPI rank of the layer split was lost; exiting\n");
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(3);
  }
  return rc;
}

int RunVerbs(CLI::App& app, std::vector<std::pair<CLI::App*, es::tools::VerbRun>>& runs) {
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

}  // namespace

int main(int argc, char** argv) {
  using namespace es::tools;
  try {
    es::MpiInit(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edgeseek: error: %s\n", e.what());
    return 1;
  }
  es::EnableTerminalProgress();  // progress lines on stderr when it is a terminal
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
    return Finish(app.exit(e));
  }
  if (es::MpiRank() > 0) {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return RunWorker(sub);
    return RunWorker(nullptr);
  }
  return Finish(RunVerbs(app, runs));
}
