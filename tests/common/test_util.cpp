#include "test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace es::test {

static std::string Env(const char* k, const char* fallback) {
  const char* v = std::getenv(k);
  return v ? v : fallback;
}
#ifndef ES_SOURCE_DIR_DEFAULT
#define ES_SOURCE_DIR_DEFAULT "."
#define ES_BINARY_DIR_DEFAULT "."
#define ES_CLI_DEFAULT "./edgeseek"
#endif
std::string SourceDir() { return Env("ES_SOURCE_DIR", ES_SOURCE_DIR_DEFAULT); }
double TimeScale() {
  const char* v = std::getenv("ES_TEST_TIME_SCALE");
  const double s = v ? std::atof(v) : 1.0;
  return s >= 1.0 ? s : 1.0;
}
std::string BinaryDir() { return Env("ES_BINARY_DIR", ES_BINARY_DIR_DEFAULT); }
// $ES_CLI, else the build's edgeseek, else an edgeseek next to the test binary (test binaries
// copied elsewhere with the CLI, as scripts/gpu/h200_compare.sh carries them).
std::string CliPath() {
  if (const char* v = std::getenv("ES_CLI")) return v;
  std::error_code ec;
  if (std::filesystem::exists(ES_CLI_DEFAULT, ec)) return ES_CLI_DEFAULT;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto next = self.parent_path() / "edgeseek";
    if (std::filesystem::exists(next, ec)) return next.string();
  }
  return ES_CLI_DEFAULT;
}

std::string TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "tmp";
  for (char& c : name)
    if (c == '/') c = '_';
  std::filesystem::path p = std::filesystem::path(BinaryDir()) / "test_tmp" / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

int RunCommand(const std::string& cmd, std::string* out, std::string* err) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(std::rand());
  const std::string o = dir + "/es_out_" + tag, e = dir + "/es_err_" + tag;
  const std::string full = "(" + cmd + ") >" + o + " 2>" + e;
  int rc = std::system(full.c_str());
  if (rc != -1 && WIFEXITED(rc)) rc = WEXITSTATUS(rc);
  if (out) *out = ReadFile(o);
  if (err) *err = ReadFile(e);
  std::remove(o.c_str());
  std::remove(e.c_str());
  return rc;
}

double RelL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

double RelL2(const float* a, const double* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
}

}  // namespace es::test
