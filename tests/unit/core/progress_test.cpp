// Progress lines (core/progress.h): drawn in place when an output is set and the wait has lasted
// the delay, erased at the end; nothing at all otherwise (stderr not a terminal: tests, logs).
#include "edgeseek/internal/core/progress.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "edgeseek/internal/core/thread_pool.h"

namespace es {
namespace {

std::string ReadAll(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

TEST(Progress, DrawsInPlaceWhenAskedAndErasesItsLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  SetProgressOutput(f, 0.0);
  {
    Progress p("generating weights", 4000000000ull, Progress::Unit::kBytes);
    ThreadPool pool(3);
    pool.ParallelFor(4, [&](int64_t b, int64_t e, int) { p.Add(uint64_t(e - b) * 1000000000ull); });
    p.Set(4000000000ull, "model.embed_tokens.weight");
  }
  SetProgressOutput(nullptr);
  const std::string s = ReadAll(f);
  std::fclose(f);
  EXPECT_EQ(s.find('\n'), std::string::npos) << s;  // one line, rewritten with \r
  EXPECT_NE(s.find("\rgenerating weights: "), std::string::npos) << s;
  EXPECT_NE(s.find("4.00 GB of 4.00 GB (100%)"), std::string::npos) << s;
  EXPECT_NE(s.find("model.embed_tokens.weight"), std::string::npos) << s;
  EXPECT_EQ(s.substr(s.size() - 4), "\r\033[K") << s;  // erased at the end
}

TEST(Progress, SilentWithoutAnOutputOrBeforeTheDelay) {
  SetProgressOutput(nullptr);
  {  // off: nothing to write to (and nothing drawn)
    Progress p("loading", 10);
    p.Add(5);
    p.Set(10, "x");
  }
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  SetProgressOutput(f, 60.0);  // a short wait: under the delay
  {
    Progress p("loading", 10);
    p.Add(5);
    p.Set(10, "x");
  }
  SetProgressOutput(nullptr);
  EXPECT_EQ(ReadAll(f), "");
  std::fclose(f);
}

TEST(Progress, TerminalOnlyWhenStderrIsATerminal) {
  // Under ctest stderr is a pipe or a file: EnableTerminalProgress declines.
  if (::isatty(2)) GTEST_SKIP() << "stderr is a terminal here";
  EXPECT_FALSE(EnableTerminalProgress());
  SetProgressOutput(nullptr);
}

}  // namespace
}  // namespace es
