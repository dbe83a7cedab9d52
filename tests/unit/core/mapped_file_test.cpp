// MappedFile::ReleasePages: a mapped file's pages leave the process's resident set and read back
// the same; memory that is not a live mapping (heap) is left alone.
#include "edgeseek/internal/core/mapped_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace es {
namespace {

// RssFile of /proc/self/status in kB (-1 when it cannot be read).
long RssFileKb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  return -1;
}

TEST(MappedFile, ReleasedPagesLeaveTheRssAndReadBackTheSame) {
  const std::string path = test::TempDir() + "/mapped_release.bin";
  constexpr size_t kBytes = size_t(16) << 20;
  std::vector<uint8_t> want(kBytes);
  for (size_t i = 0; i < kBytes; ++i) want[i] = uint8_t(i * 2654435761u >> 13);
  {
    std::ofstream o(path, std::ios::binary);
    o.write(reinterpret_cast<const char*>(want.data()), std::streamsize(kBytes));
  }
  const auto f = MappedFile::Open(path);
  ASSERT_EQ(f->size(), kBytes);
  ASSERT_EQ(std::memcmp(f->data(), want.data(), kBytes), 0);  // every page touched
  const long before = RssFileKb();
  if (before < 0) GTEST_SKIP() << "no RssFile in /proc/self/status";
  // An odd range inside the mapping: rounded out, the whole file here.
  MappedFile::ReleasePages(f->data() + 4097, kBytes - 8192);
  const long after = RssFileKb();
  EXPECT_LE(after, before - long(kBytes / 1024) + 1024) << before << " kB -> " << after << " kB";
  EXPECT_EQ(std::memcmp(f->data(), want.data(), kBytes), 0);
  std::remove(path.c_str());
}

TEST(MappedFile, ReleaseLeavesOtherMemoryAlone) {
  std::vector<uint8_t> heap(size_t(8) << 20, 0xA5);
  MappedFile::ReleasePages(heap.data(), heap.size());
  for (size_t i = 0; i < heap.size(); i += 4096) ASSERT_EQ(heap[i], 0xA5) << i;
}

}  // namespace
}  // namespace es
