// Owning, zero-initialized array for large streamed buffers (prepacked / quantized weights).
// Big allocations (≥ 1 MiB) are mmap'ed at a 2 MiB boundary and marked MADV_HUGEPAGE, so with
// transparent_hugepage in `madvise` mode (the common default) they are backed by 2 MiB pages:
// a weight stream then costs one TLB miss per 2 MiB instead of per 4 KiB. Falls back to plain
// 4 KiB pages when the kernel says no (or DFL_HUGEPAGES=0); small arrays use aligned new.
// Moving keeps data() valid; not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

namespace dfl {

namespace detail {
// 64-byte aligned, zero-filled storage of `bytes`; *mapped tells how to free it.
void* huge_alloc(size_t bytes, bool* mapped);
void huge_free(void* p, size_t bytes, bool mapped);
}  // namespace detail

// Whether large HugeArray allocations ask for huge pages (false under DFL_HUGEPAGES=0).
bool huge_pages_requested();

template <typename T>
class HugeArray {
 public:
  HugeArray() = default;
  explicit HugeArray(size_t n) { reset(n); }
  HugeArray(size_t n, T fill) {
    reset(n);
    for (size_t i = 0; i < n; ++i) data_[i] = fill;
  }
  HugeArray(HugeArray&& o) noexcept { swap(o); }
  HugeArray& operator=(HugeArray&& o) noexcept {
    if (this != &o) {
      HugeArray tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }
  HugeArray(const HugeArray&) = delete;
  HugeArray& operator=(const HugeArray&) = delete;
  ~HugeArray() { release(); }

  // Replaces the contents by n zero-initialized elements.
  void reset(size_t n) {
    release();
    if (n == 0) return;
    data_ = static_cast<T*>(detail::huge_alloc(n * sizeof(T), &mapped_));
    size_ = n;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  void release() {
    if (data_) detail::huge_free(data_, size_ * sizeof(T), mapped_);
    data_ = nullptr;
    size_ = 0;
    mapped_ = false;
  }
  void swap(HugeArray& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(mapped_, o.mapped_);
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace dfl
