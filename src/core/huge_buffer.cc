#include "core/huge_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace dfl {

namespace {
constexpr size_t kHuge = size_t(2) << 20;
constexpr size_t kPage = 4096;
constexpr size_t kMinMapped = size_t(1) << 20;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

bool huge_pages_requested() {
  static const bool on = [] {
    const char* s = std::getenv("DFL_HUGEPAGES");
    return !(s && s[0] == '0');
  }();
  return on;
}

namespace detail {

void* huge_alloc(size_t bytes, bool* mapped) {
  *mapped = false;
  if (bytes >= kMinMapped) {
    const size_t len = round_up(bytes, kPage);
    // Over-allocate by 2 MiB, keep the 2 MiB-aligned part, give the rest back.
    void* raw = mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw != MAP_FAILED) {
      const uintptr_t r = reinterpret_cast<uintptr_t>(raw);
      const uintptr_t a = (r + kHuge - 1) & ~(kHuge - 1);
      if (a > r) munmap(raw, a - r);
      const uintptr_t end = r + len + kHuge, used_end = a + len;
      if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
      void* p = reinterpret_cast<void*>(a);
#ifdef MADV_HUGEPAGE
      if (huge_pages_requested()) madvise(p, len, MADV_HUGEPAGE);  // best effort
#endif
      *mapped = true;
      return p;  // anonymous mappings are zero-filled
    }
  }
  void* p = ::operator new(round_up(bytes, 64), std::align_val_t(64));
  std::memset(p, 0, bytes);
  return p;
}

void huge_free(void* p, size_t bytes, bool mapped) {
  if (mapped)
    munmap(p, round_up(bytes, kPage));
  else
    ::operator delete(p, std::align_val_t(64));
}

}  // namespace detail
}  // namespace dfl
