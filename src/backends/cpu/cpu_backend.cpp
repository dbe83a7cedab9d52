// CPU backend (work in progress).
#include "edgeseek/backends/backend.h"
#include "edgeseek/core/error.h"
namespace es {
std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions&) { Fail("cpu backend: not yet"); }
}  // namespace es
