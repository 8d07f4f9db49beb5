// Reading trace files: whole (for parsing) or their first bytes (for content detection).
#include "trace/io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <isa-l/igzip_lib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace gm::trace::detail {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

/// Closes a file descriptor when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

/// Reads up to `limit` bytes (SIZE_MAX: to the end) from `fd` into `buf`.
Result<void> read_fd(const std::string& path, int fd, std::size_t size_hint, std::size_t limit,
                     PaddedBuffer& buf) {
  if (!buf.reserve(std::min(limit, std::max<std::size_t>(size_hint, 4096))))
    return make_error(fmt::format("{}: out of memory", path));
  std::size_t n = 0;
  while (n < limit) {
    if (n == buf.capacity() && !buf.reserve(std::min(limit, buf.capacity() * 2)))
      return make_error(fmt::format("{}: out of memory", path));
    ssize_t got = ::read(fd, buf.data() + n, std::min(buf.capacity(), limit) - n);
    if (got < 0) {
      if (errno == EINTR) continue;
      return make_error(fmt::format("{}: read failed at byte {}: {}", path, n, errno_text()));
    }
    if (got == 0) break;
    n += static_cast<std::size_t>(got);
  }
  buf.set_size(n);
  return ok_result();
}

bool is_gzip(const PaddedBuffer& b) {
  return b.size() >= 2 && static_cast<unsigned char>(b.data()[0]) == 0x1f &&
         static_cast<unsigned char>(b.data()[1]) == 0x8b;
}

/// Inflates every gzip member of `in` into `out`, stopping after `limit` output bytes (`truncated` then).
Result<void> inflate_gzip(const std::string& path, const PaddedBuffer& in, PaddedBuffer& out,
                          std::size_t limit, bool input_complete, bool& truncated) {
  const auto* src = reinterpret_cast<const std::uint8_t*>(in.data());
  const std::size_t src_len = in.size();
  std::size_t guess = src_len * 8;
  if (input_complete && src_len >= 18) {  // ISIZE trailer: uncompressed size mod 2^32 of the last member
    std::uint32_t isize = 0;
    std::memcpy(&isize, src + src_len - 4, 4);
    if (isize >= src_len) guess = isize;
  }
  if (!out.reserve(std::min(limit, guess + 1))) return make_error(fmt::format("{}: out of memory", path));
  std::size_t pos_in = 0, produced = 0;
  truncated = false;
  while (pos_in < src_len) {
    inflate_state state;
    isal_inflate_init(&state);
    state.crc_flag = ISAL_GZIP;
    state.next_in = const_cast<std::uint8_t*>(src + pos_in);
    const std::size_t member_in = std::min<std::size_t>(src_len - pos_in, UINT32_MAX);
    state.avail_in = static_cast<std::uint32_t>(member_in);
    for (;;) {
      if (produced >= limit) {
        truncated = true;
        out.set_size(produced);
        return ok_result();
      }
      if (produced == out.capacity() && !out.reserve(std::min(limit, out.capacity() * 2)))
        return make_error(fmt::format("{}: out of memory", path));
      state.next_out = reinterpret_cast<std::uint8_t*>(out.data() + produced);
      const std::size_t room = std::min<std::size_t>(std::min(out.capacity(), limit) - produced, UINT32_MAX);
      state.avail_out = static_cast<std::uint32_t>(room);
      int rc = isal_inflate(&state);
      produced += room - state.avail_out;
      if (rc != ISAL_DECOMP_OK)
        return make_error(fmt::format("{}: invalid gzip data near compressed byte {}", path,
                                      pos_in + (member_in - state.avail_in)));
      if (state.block_state == ISAL_BLOCK_FINISH) break;
      if (state.avail_in == 0 && state.avail_out != 0) {
        if (!input_complete) {  // only the head of the file was read
          truncated = true;
          out.set_size(produced);
          return ok_result();
        }
        return make_error(fmt::format("{}: truncated gzip data at compressed byte {}", path, src_len));
      }
    }
    pos_in += member_in - state.avail_in;
    while (pos_in < src_len && src[pos_in] == 0) ++pos_in;  // trailing zero padding
  }
  out.set_size(produced);
  return ok_result();
}

Result<int> open_file(const std::string& path, std::size_t& size_hint) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(fmt::format("{}: cannot open: {}", path, errno_text()));
  struct stat st {};
  size_hint = 0;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) size_hint = static_cast<std::size_t>(st.st_size) + 1;
  return fd;
}

}  // namespace

Result<void> load(const std::string& path, PaddedBuffer& buf) {
  std::size_t size_hint = 0;
  GM_TRY(int fd, open_file(path, size_hint));
  FdCloser closer{fd};
  PaddedBuffer raw;
  GM_TRY_VOID(read_fd(path, fd, size_hint, SIZE_MAX, raw));
  if (!is_gzip(raw)) {
    raw.swap(buf);
    return ok_result();
  }
  bool truncated = false;
  return inflate_gzip(path, raw, buf, SIZE_MAX, true, truncated);
}

Result<void> load_head(const std::string& path, std::size_t max_bytes, PaddedBuffer& buf, bool& truncated) {
  std::size_t size_hint = 0;
  GM_TRY(int fd, open_file(path, size_hint));
  FdCloser closer{fd};
  PaddedBuffer raw;
  GM_TRY_VOID(read_fd(path, fd, max_bytes + 1, max_bytes + 1, raw));
  const bool more = raw.size() > max_bytes;
  if (!is_gzip(raw)) {
    truncated = more;
    if (more) raw.set_size(max_bytes);
    raw.swap(buf);
    return ok_result();
  }
  return inflate_gzip(path, raw, buf, max_bytes, !more, truncated);
}

}  // namespace gm::trace::detail
