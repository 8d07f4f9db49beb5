// Content detection: what a file is, from its first bytes (never from its name).
#include <cstdint>
#include <string_view>

#include "trace/internal.h"

namespace gm::trace::detail {
namespace {

bool starts(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

/// Reads a protobuf varint at s[pos]; false when it runs past the end or over 10 bytes.
bool varint(std::string_view s, std::size_t& pos, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && pos < s.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(s[pos++]);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

/// A Perfetto Trace message: a run of field 1 (TracePacket, length-delimited) entries whose contents
/// start with a valid field tag. Checks the packets that fit in `head`.
bool looks_like_perfetto(std::string_view head, bool complete) {
  std::size_t pos = 0;
  int packets = 0;
  while (pos < head.size() && packets < 64) {
    if (static_cast<unsigned char>(head[pos]) != 0x0a) return false;
    ++pos;
    std::uint64_t len = 0;
    if (!varint(head, pos, len)) return !complete && packets > 0;
    if (len > 0) {
      if (pos >= head.size()) return !complete && packets > 0;
      std::size_t p = pos;
      std::uint64_t tag = 0;
      if (!varint(head, p, tag) && p < head.size()) return false;
      const auto wire = tag & 7;
      if ((tag >> 3) == 0 || !(wire == 0 || wire == 1 || wire == 2 || wire == 5)) return false;
    }
    if (len > head.size() - pos) return !complete;  // a packet longer than the head
    pos += len;
    ++packets;
  }
  return packets > 0;
}

}  // namespace

Sniff sniff(std::string_view head, bool complete) {
  auto unknown = [](std::string what) { return Sniff{Format::unknown, std::move(what)}; };
  if (head.empty()) return unknown("an empty file");
  if (starts(head, "\x89PNG\r\n\x1a\n")) return unknown("a PNG image");
  if (starts(head, "\xff\xd8\xff")) return unknown("a JPEG image");
  if (starts(head, "GIF87a") || starts(head, "GIF89a")) return unknown("a GIF image");
  if (starts(head, "%PDF-")) return unknown("a PDF document");
  if (starts(head, "<svg") || starts(head, "<?xml")) return unknown("an XML / SVG document");
  if (starts(head, "<!DOCTYPE") || starts(head, "<html") || starts(head, "<!doctype"))
    return unknown("an HTML page");
  if (starts(head, "PK\x03\x04")) return unknown("a ZIP archive (torch.save checkpoints are ZIP archives)");
  if (starts(head,
             "\x7f"
             "ELF"))
    return unknown("an ELF executable or library");
  if (starts(head, "SQLite format 3")) return unknown("an SQLite database");
  if (starts(head, "\x93NUMPY")) return unknown("a NumPy array (.npy)");
  if (static_cast<unsigned char>(head[0]) == 0x80 && head.size() >= 2 && head[1] >= 2 && head[1] <= 5)
    return unknown(
        "a Python pickle (a CUDA memory snapshot from torch.cuda.memory._dump_snapshot is one), not a "
        "profiler "
        "trace");
  std::size_t i = 0;
  if (starts(head, "\xef\xbb\xbf")) i = 3;  // UTF-8 byte order mark
  while (i < head.size() && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) ++i;
  if (i < head.size() && (head[i] == '{' || head[i] == '[')) return Sniff{Format::json, {}};
  if (i == head.size()) return unknown("a file of white space only");
  if (looks_like_perfetto(head, complete)) return Sniff{Format::perfetto, {}};
  // Text or binary?
  std::size_t control = 0;
  const std::size_t n = std::min<std::size_t>(head.size(), 4096);
  for (std::size_t k = 0; k < n; ++k) {
    const auto c = static_cast<unsigned char>(head[k]);
    if (c < 0x09 || (c > 0x0d && c < 0x20)) ++control;
  }
  if (control == 0) return unknown("a text file that is not JSON");
  return unknown("binary data that is neither JSON nor a Perfetto protobuf trace");
}

}  // namespace gm::trace::detail
