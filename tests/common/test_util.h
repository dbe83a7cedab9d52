// Shared test helpers: paths from the environment, running the CLI, comparing arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace es::test {

std::string SourceDir();  // repository root
std::string BinaryDir();  // build directory
std::string CliPath();    // the edgeseek executable
std::string TempDir();    // a fresh directory under the build dir for this test
// Runs a shell command; returns the exit code, with stdout and stderr captured.
int RunCommand(const std::string& cmd, std::string* out = nullptr, std::string* err = nullptr);
// ‖a − b‖ / ‖b‖ over all elements.
double RelL2(const std::vector<float>& a, const std::vector<float>& b);
double RelL2(const float* a, const double* b, size_t n);
// Deterministic pseudo-random floats in [-scale, scale).
std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale = 1.0f);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& data);
// What wall-clock bounds are multiplied by: $ES_TEST_TIME_SCALE (scripts/test_arm64.sh sets it
// under qemu-user, which runs the code several times slower), else 1.
double TimeScale();

}  // namespace es::test
