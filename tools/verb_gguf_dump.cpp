// `edgeseek gguf-dump FILE.gguf [--all]`: prints a GGUF file's header, metadata and tensor
// table (name, type, shape outermost-first, offset, bytes) after full validation.
#include <cstdio>
#include <memory>
#include <string>

#include "edgeseek/internal/formats/gguf.h"
#include "verb.h"

namespace es::tools {
namespace {

struct DumpArgs {
  std::string path;
  bool all = false;
};

int Run(const DumpArgs& a) {
  const auto f = GgufFile::Open(a.path);
  std::printf("%s: GGUF v%u, %zu metadata keys, %zu tensors, alignment %u, data at %llu\n",
              a.path.c_str(), f->version(), f->metadata().size(), f->tensor_infos().size(),
              f->alignment(), static_cast<unsigned long long>(f->data_offset()));
  for (const auto& [k, v] : f->metadata())
    std::printf("  %-48s %s\n", k.c_str(), v.Describe(a.all ? size_t(-1) : 4).c_str());
  uint64_t total = 0;
  for (const auto& t : f->tensor_infos()) {
    std::printf("  %-40s %-6s %-22s offset %-12llu %zu bytes\n", t.name.c_str(),
                std::string(Name(t.dtype)).c_str(), ShapeStr(t.shape).c_str(),
                static_cast<unsigned long long>(t.offset), t.nbytes);
    total += t.nbytes;
  }
  std::printf("  total tensor data: %.1f MB\n", double(total) / 1e6);
  return 0;
}

VerbRun Setup(CLI::App& sub) {
  auto a = std::make_shared<DumpArgs>();
  sub.add_option("file", a->path, "GGUF file")->required();
  sub.add_flag("--all", a->all, "print whole arrays");
  return [a] { return Run(*a); };
}

const VerbRegistrar kReg("gguf-dump", "print a GGUF file's metadata and tensor table", Setup);

}  // namespace
}  // namespace es::tools
