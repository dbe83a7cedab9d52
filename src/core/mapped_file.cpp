// mmap wrapper.
#include "edgeseek/internal/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "edgeseek/internal/core/error.h"

namespace es {
namespace {
// The live mappings, begin -> end (ReleasePages drops pages of these only).
std::mutex g_maps_mu;
std::map<uintptr_t, uintptr_t>& LiveMaps() {
  static std::map<uintptr_t, uintptr_t> m;
  return m;
}
}  // namespace

std::shared_ptr<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail("cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail("cannot read '", path, "': not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      Fail("cannot mmap '", path, "': ", std::strerror(errno));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    std::lock_guard<std::mutex> lock(g_maps_mu);
    LiveMaps()[uintptr_t(p)] = uintptr_t(p) + f->size_;
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (!data_) return;
  {
    std::lock_guard<std::mutex> lock(g_maps_mu);
    LiveMaps().erase(uintptr_t(data_));
  }
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::ReleasePages(const void* p, size_t n) {
  const uintptr_t a = uintptr_t(p), e = a + n;
  uintptr_t map_lo, map_hi;
  {
    std::lock_guard<std::mutex> lock(g_maps_mu);
    const auto& m = LiveMaps();
    auto it = m.upper_bound(a);  // the first mapping starting after a
    if (it == m.begin()) return;
    --it;
    if (e > it->second) return;  // not inside one mapping
    map_lo = it->first;
    map_hi = it->second;
  }
  // Rounded out to 2 MiB (clamped to the mapping): the kernel maps a file's large folios as
  // whole 2 MiB pages (FilePmdMapped), so a neighbour's first touch maps the end of a range
  // dropped before; dropping whole huge pages leaves none of it behind. Pages of neighbours
  // dropped with it are read again from the page cache when touched: the mapping is read-only
  // (PROT_READ), so it holds no private copies to lose.
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = std::max(map_lo, a / kHuge * kHuge);
  const uintptr_t hi = std::min((map_hi + page - 1) / page * page, (e + kHuge - 1) / kHuge * kHuge);
  // Advisory: a failure leaves the pages resident, nothing else.
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace es
