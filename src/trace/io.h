#pragma once
// Internal to src/trace: reading trace files into padded buffers (gzip inflated with isa-l).
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "util/result.h"

namespace gm::trace::detail {

/// Spare zero bytes kept after the data of every buffer (simdjson needs 64).
inline constexpr std::size_t kPaddingBytes = 64;

/// malloc'd bytes with kPaddingBytes spare bytes after size().
class PaddedBuffer {
 public:
  PaddedBuffer() = default;
  PaddedBuffer(const PaddedBuffer&) = delete;
  PaddedBuffer& operator=(const PaddedBuffer&) = delete;
  PaddedBuffer(PaddedBuffer&& o) noexcept { swap(o); }
  PaddedBuffer& operator=(PaddedBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  ~PaddedBuffer() { std::free(data_); }
  /// Grows the capacity to at least `capacity` bytes (plus padding); false when out of memory.
  bool reserve(std::size_t capacity) {
    if (capacity <= capacity_ && data_ != nullptr) return true;
    auto* p = static_cast<char*>(std::realloc(data_, capacity + kPaddingBytes));
    if (p == nullptr) return false;
    data_ = p;
    capacity_ = capacity;
    return true;
  }
  char* data() { return data_; }
  const char* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  void swap(PaddedBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  /// Sets the data size and zeroes the padding after it.
  void set_size(std::size_t n) {
    size_ = n;
    std::memset(data_ + n, 0, kPaddingBytes);
  }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

/// Reads a whole file into `buf`, inflating gzip (detected by its magic bytes, not by the name).
Result<void> load(const std::string& path, PaddedBuffer& buf);

/// Reads at most `max_bytes` of a file's (inflated) content into `buf`; for content detection.
/// `truncated` is set when the content goes on after what was read.
Result<void> load_head(const std::string& path, std::size_t max_bytes, PaddedBuffer& buf, bool& truncated);

}  // namespace gm::trace::detail
