#pragma once
// Helpers shared by the fuzz targets.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>

namespace gm::fuzz {

/// An in-memory file holding `text`, named by a /proc/self/fd path, for parsers that take a path.
class MemFile {
 public:
  explicit MemFile(std::string_view text) : fd_(memfd_create("gpumeter-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

/// Aborts (a fuzzer finding) when `ok` is false.
inline void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace gm::fuzz
