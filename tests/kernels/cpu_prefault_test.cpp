// The CPU backend fills the page tables of mmapped weights at load (PrepareWeight): reading a
// prepared weight afterwards takes no page fault, where the same read of an unprepared mapping
// of the file takes one per fault-around window (64 KB by default). Without it a mixture-of-experts
// model faults its routed experts in during the first decode steps that pick them.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/mapped_file.h"
#include "edgeseek/internal/core/tensor.h"

namespace es {
namespace {

// Page faults (minor + major) of the calling thread so far.
long ThreadFaults() {
  struct rusage ru {};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt + ru.ru_majflt;
}

// Faults taken by reading one byte of every page of [p, p + n).
long FaultsToRead(const uint8_t* p, size_t n) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const long f0 = ThreadFaults();
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < n; i += page) sink = uint8_t(sink + p[i]);
  (void)sink;
  return ThreadFaults() - f0;
}

TEST(CpuPrefault, PreparedFileWeightsTakeNoFaults) {
  // A 16 MB file (the page cache holds it: just written), a "weight" at an unaligned offset.
  const std::string path = testing::TempDir() + "es_prefault_" + std::to_string(getpid()) + ".bin";
  constexpr size_t kBytes = size_t(16) << 20, kOffset = 1000;
  {
    std::vector<uint8_t> data(kBytes);
    for (size_t i = 0; i < kBytes; ++i) data[i] = uint8_t(i * 7 + 3);
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(std::fwrite(data.data(), 1, kBytes, f), kBytes);
    std::fclose(f);
  }
  auto weight = [&](const std::shared_ptr<MappedFile>& file) {
    Tensor t;
    t.name = "w";
    t.dtype = DType::kF32;
    t.shape = {int64_t((kBytes - kOffset) / 4 / 256), 256};
    t.data = file->data() + kOffset;
    t.nbytes = size_t(t.numel()) * 4;
    return t;
  };
  BackendOptions bo;
  bo.threads = 2;
  auto be = CreateBackend("cpu", bo);
  // Unprepared: a fresh mapping faults as it is read (the kernel maps up to a folio a fault).
  {
    auto file = MappedFile::Open(path);
    const Tensor t = weight(file);
    EXPECT_GE(FaultsToRead(t.bytes(), t.nbytes), 1);
  }
  // Prepared: every page of the weight is mapped already.
  {
    auto file = MappedFile::Open(path);
    const Tensor t = weight(file);
    be->PrepareWeight(t);
    EXPECT_EQ(FaultsToRead(t.bytes(), t.nbytes), 0);
    EXPECT_NE(be->description().find("prefaulted"), std::string::npos) << be->description();
  }
  std::remove(path.c_str());
}

// The inode of the mapping holding address a in /proc/self/maps (0: anonymous), -1 if none.
long MappingInode(uintptr_t a) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0, inode = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %*s %*s %*s %lu", &lo, &hi, &inode) == 3 && a >= lo &&
        a < hi)
      return long(inode);
  }
  return -1;
}

bool TransparentHugePagesOn() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return s.find("[always]") != std::string::npos || s.find("[madvise]") != std::string::npos;
}

// Where transparent huge pages are on, PrepareWeight moves a file weight's whole 2 MiB pages onto
// anonymous memory at the same addresses (7B Q8_0 decode 5x faster on the development VM): the
// weight reads the same bytes, its interior is no longer the file's mapping, the partial pages at
// its edges still are, and the file unmaps cleanly. By default only files of 2 GiB or more
// (BackendOptions::huge_pages_min_file): this one keeps its pages then.
TEST(CpuPrefault, FileWeightsMoveOntoHugePagesWithTheSameBytes) {
  if (!TransparentHugePagesOn()) GTEST_SKIP() << "transparent huge pages are off here";
  const std::string path = testing::TempDir() + "es_huge_" + std::to_string(getpid()) + ".bin";
  constexpr size_t kBytes = size_t(20) << 20, kOffset = 1000;
  std::vector<uint8_t> data(kBytes);
  for (size_t i = 0; i < kBytes; ++i) data[i] = uint8_t(i * 13 + (i >> 12));
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(std::fwrite(data.data(), 1, kBytes, f), kBytes);
    std::fclose(f);
  }
  auto weight = [&](const std::shared_ptr<MappedFile>& file) {  // 1000 bytes in, 2000 short
    Tensor t;
    t.name = "w";
    t.dtype = DType::kF32;
    t.shape = {int64_t((kBytes - 2 * kOffset) / 4 / 256), 256};
    t.data = file->data() + kOffset;
    t.nbytes = size_t(t.numel()) * 4;
    return t;
  };
  BackendOptions bo;
  bo.threads = 2;
  bo.huge_pages_min_file = 0;  // this small file too
  auto be = CreateBackend("cpu", bo);
  {
    auto file = MappedFile::Open(path);
    const Tensor t = weight(file);
    const auto a = reinterpret_cast<uintptr_t>(t.data);
    constexpr uintptr_t kHuge = uintptr_t(2) << 20;
    const uintptr_t first = (a + kHuge - 1) / kHuge * kHuge;
    ASSERT_GT(MappingInode(a), 0) << "the file's own mapping";
    be->PrepareWeight(t);
    EXPECT_EQ(std::memcmp(t.bytes(), data.data() + kOffset, t.nbytes), 0);
    EXPECT_EQ(MappingInode(first), 0) << "the first whole 2 MiB page moved";
    EXPECT_EQ(MappingInode(first + 5 * kHuge + 4096), 0);
    EXPECT_GT(MappingInode(a), 0) << "the partial page at the start stays the file's";
    EXPECT_NE(be->description().find("huge pages"), std::string::npos) << be->description();
  }
  {  // the default: files under 2 GiB keep the file's pages
    BackendOptions plain;
    plain.threads = 2;
    auto small = CreateBackend("cpu", plain);
    auto file = MappedFile::Open(path);
    const Tensor t = weight(file);
    small->PrepareWeight(t);
    EXPECT_GT(MappingInode(reinterpret_cast<uintptr_t>(t.data) + (uintptr_t(4) << 20)), 0);
    EXPECT_EQ(small->description().find("huge pages"), std::string::npos);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace es
