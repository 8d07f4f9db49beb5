// Streaming Kineto reader: one padded buffer per file (gzip inflated with isa-l), one simdjson
// On-Demand pass over it, compact tables of only what the analyses need.
#include <fcntl.h>
#include <fmt/format.h>
#include <isa-l/igzip_lib.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "trace/internal.h"

namespace gm::trace {
namespace detail {
namespace {

namespace od = simdjson::ondemand;

/// malloc'd bytes with SIMDJSON_PADDING spare bytes after size().
class PaddedBuffer {
 public:
  PaddedBuffer() = default;
  PaddedBuffer(const PaddedBuffer&) = delete;
  PaddedBuffer& operator=(const PaddedBuffer&) = delete;
  ~PaddedBuffer() { std::free(data_); }
  bool reserve(std::size_t capacity) {
    if (capacity <= capacity_) return true;
    auto* p = static_cast<char*>(std::realloc(data_, capacity + simdjson::SIMDJSON_PADDING));
    if (p == nullptr) return false;
    data_ = p;
    capacity_ = capacity;
    return true;
  }
  char* data() { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  void swap(PaddedBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  void set_size(std::size_t n) {
    size_ = n;
    std::memset(data_ + n, 0, simdjson::SIMDJSON_PADDING);
  }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

std::string errno_text() { return std::strerror(errno); }

Result<void> read_fd(const std::string& path, int fd, std::size_t size_hint, PaddedBuffer& buf) {
  if (!buf.reserve(std::max<std::size_t>(size_hint, 4096))) return make_error(fmt::format("{}: out of memory", path));
  std::size_t n = 0;
  for (;;) {
    if (n == buf.capacity() && !buf.reserve(buf.capacity() * 2)) return make_error(fmt::format("{}: out of memory", path));
    ssize_t got = ::read(fd, buf.data() + n, buf.capacity() - n);
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

Result<void> inflate_gzip(const std::string& path, const PaddedBuffer& in, PaddedBuffer& out) {
  const auto* src = reinterpret_cast<const std::uint8_t*>(const_cast<PaddedBuffer&>(in).data());
  const std::size_t src_len = in.size();
  std::size_t guess = src_len * 8;
  if (src_len >= 18) {  // ISIZE trailer: uncompressed size mod 2^32 of the last member
    std::uint32_t isize = 0;
    std::memcpy(&isize, src + src_len - 4, 4);
    if (isize >= src_len) guess = isize;
  }
  if (!out.reserve(guess + 1)) return make_error(fmt::format("{}: out of memory", path));
  std::size_t pos_in = 0, produced = 0;
  while (pos_in < src_len) {
    inflate_state state;
    isal_inflate_init(&state);
    state.crc_flag = ISAL_GZIP;
    state.next_in = const_cast<std::uint8_t*>(src + pos_in);
    const std::size_t member_in = std::min<std::size_t>(src_len - pos_in, UINT32_MAX);
    state.avail_in = static_cast<std::uint32_t>(member_in);
    for (;;) {
      if (produced == out.capacity() && !out.reserve(out.capacity() * 2))
        return make_error(fmt::format("{}: out of memory", path));
      state.next_out = reinterpret_cast<std::uint8_t*>(out.data() + produced);
      const std::size_t room = std::min<std::size_t>(out.capacity() - produced, UINT32_MAX);
      state.avail_out = static_cast<std::uint32_t>(room);
      int rc = isal_inflate(&state);
      produced += room - state.avail_out;
      if (rc != ISAL_DECOMP_OK)
        return make_error(fmt::format("{}: invalid gzip data near compressed byte {}", path,
                                      pos_in + (member_in - state.avail_in)));
      if (state.block_state == ISAL_BLOCK_FINISH) break;
      if (state.avail_in == 0 && state.avail_out != 0)
        return make_error(fmt::format("{}: truncated gzip data at compressed byte {}", path, src_len));
    }
    pos_in += member_in - state.avail_in;
    while (pos_in < src_len && src[pos_in] == 0) ++pos_in;  // trailing zero padding
  }
  out.set_size(produced);
  return ok_result();
}

bool has_suffix(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Result<void> load(const std::string& path, PaddedBuffer& buf) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(fmt::format("{}: cannot open: {}", path, errno_text()));
  struct stat st {};
  std::size_t size_hint = 0;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) size_hint = static_cast<std::size_t>(st.st_size) + 1;
  PaddedBuffer raw;
  auto r = read_fd(path, fd, size_hint, raw);
  ::close(fd);
  if (!r) return r.error();
  const bool gz = raw.size() >= 2 && static_cast<unsigned char>(raw.data()[0]) == 0x1f &&
                  static_cast<unsigned char>(raw.data()[1]) == 0x8b;
  if (!gz) {
    raw.swap(buf);
    return ok_result();
  }
  return inflate_gzip(path, raw, buf);
}


std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

/// Contents of a string token without quotes; the token itself if it is not a string.
std::string_view unquote(std::string_view token) {
  token = trim(token);
  if (token.size() >= 2 && token.front() == '"' && token.back() == '"') return token.substr(1, token.size() - 2);
  return token;
}

enum class Cat : std::uint8_t { other, kernel, memory, runtime, cpu_op, annotation, gpu_annotation };

Cat classify_cat(std::string_view cat) {
  if (cat == "kernel" || cat == "Kernel" || cat == "mtia_ccp_events") return Cat::kernel;
  if (cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "Memcpy" || cat == "Memset") return Cat::memory;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime" || cat == "Driver" ||
      cat == "mtia_runtime" || cat == "hip_runtime")
    return Cat::runtime;
  if (cat == "cpu_op" || cat == "Operator") return Cat::cpu_op;
  if (cat == "user_annotation" || cat == "User Annotation") return Cat::annotation;
  if (cat == "gpu_user_annotation" || cat == "GPU User Annotation") return Cat::gpu_annotation;
  return Cat::other;
}

struct EventFields {
  std::string_view ph, cat, name, pid, tid, ts, dur;
  std::int64_t correlation = -1;
  bool collective = false;
};

simdjson::error_code read_args(od::value args, EventFields& ev) {
  od::object obj;
  if (auto e = args.get_object().get(obj)) return e == simdjson::INCORRECT_TYPE ? simdjson::SUCCESS : e;
  for (auto field : obj) {
    od::field f;
    if (auto e = std::move(field).get(f)) return e;
    od::raw_json_string key = f.key();
    if (key == "correlation") {
      std::string_view tok;
      tok = f.value().raw_json_token();
      tok = trim(tok);
      std::int64_t v = 0;
      bool okv = !tok.empty() && tok.size() < 19;
      for (char c : tok) {
        if (c < '0' || c > '9') { okv = false; break; }
        v = v * 10 + (c - '0');
      }
      if (okv) ev.correlation = v;
    } else if (key == "Collective name" || key == "collective_name") {
      ev.collective = true;
    }
  }
  return simdjson::SUCCESS;
}

simdjson::error_code read_event(od::value value, EventFields& ev) {
  od::object obj;
  if (auto e = value.get_object().get(obj)) return e;
  for (auto field : obj) {
    od::field f;
    if (auto e = std::move(field).get(f)) return e;
    od::raw_json_string key = f.key();
    std::string_view* slot = nullptr;
    if (key == "ph") slot = &ev.ph;
    else if (key == "cat") slot = &ev.cat;
    else if (key == "name") slot = &ev.name;
    else if (key == "pid") slot = &ev.pid;
    else if (key == "tid") slot = &ev.tid;
    else if (key == "ts") slot = &ev.ts;
    else if (key == "dur") slot = &ev.dur;
    else if (key == "args") {
      if (auto e = read_args(f.value(), ev)) return e;
      continue;
    }
    if (slot != nullptr) {
      od::value v = f.value();
      od::json_type type;
      if (auto e = v.type().get(type)) return e;
      if (type == od::json_type::object || type == od::json_type::array) continue;  // skipped by iteration
      std::string_view tok;
      tok = v.raw_json_token();
      *slot = trim(tok);
    }
  }
  return simdjson::SUCCESS;
}

struct Collector {
  RawTrace& out;
  std::string key_buf;

  std::uint32_t thread_id(std::string_view pid, std::string_view tid) {
    key_buf.assign(pid);
    key_buf.push_back('/');
    key_buf.append(tid);
    return out.threads.id(key_buf);
  }

  void add(const EventFields& ev) {
    ++out.event_count;
    if (unquote(ev.ph) != "X") return;
    const Cat cat = classify_cat(unquote(ev.cat));
    if (cat == Cat::other) return;
    auto ts = parse_us_to_ns(ev.ts);
    auto dur = parse_us_to_ns(ev.dur);
    const std::string_view name = unquote(ev.name);
    if (cat == Cat::kernel || cat == Cat::memory) {
      if (!ts || !dur || *dur < 0) {
        ++out.skipped_events;
        return;
      }
      Klass klass = Klass::compute;
      if (cat == Cat::memory) klass = Klass::memory;
      else if (name.starts_with("nccl") || ev.collective) klass = Klass::communication;
      out.activities.push_back(Activity{*ts, *dur, ev.correlation, out.names.id(name), out.devices.id(unquote(ev.pid)), klass});
      return;
    }
    if (!ts) return;
    if (cat == Cat::runtime) {
      if (ev.correlation >= 0) out.launches.push_back(Launch{ev.correlation, *ts, thread_id(ev.pid, ev.tid)});
      return;
    }
    if (!dur || *dur < 0) return;
    SpanKind kind = SpanKind::op;
    std::uint32_t thread = 0;
    if (name.starts_with("ProfilerStep#")) {
      kind = SpanKind::step;
    } else if (cat == Cat::annotation) {
      kind = SpanKind::annotation;
    } else if (cat == Cat::gpu_annotation) {
      kind = SpanKind::gpu_annotation;
      thread = out.devices.id(unquote(ev.pid));
    }
    if (kind != SpanKind::gpu_annotation) thread = thread_id(ev.pid, ev.tid);
    out.spans.push_back(Span{*ts, *ts + *dur, thread, out.names.id(name), kind});
  }
};

simdjson::error_code read_device_properties(od::value value, RawTrace& out) {
  od::array arr;
  if (auto e = value.get_array().get(arr)) return e == simdjson::INCORRECT_TYPE ? simdjson::SUCCESS : e;
  for (auto item : arr) {
    od::object obj;
    if (auto e = item.get_object().get(obj)) {
      if (e == simdjson::INCORRECT_TYPE) continue;
      return e;
    }
    std::string id, gpu;
    for (auto field : obj) {
      od::field f;
      if (auto e = std::move(field).get(f)) return e;
      od::raw_json_string key = f.key();
      if (key == "id" || key == "name") {
        std::string_view tok;
        od::value v = f.value();
        od::json_type type;
        if (auto e = v.type().get(type)) return e;
        if (type == od::json_type::object || type == od::json_type::array) continue;
        tok = v.raw_json_token();
        (key == "id" ? id : gpu) = std::string(unquote(tok));
      }
    }
    if (!gpu.empty()) out.device_names[id] = unescape_json(gpu);
  }
  return simdjson::SUCCESS;
}

simdjson::error_code read_distributed_info(od::value value, RawTrace& out) {
  od::object obj;
  if (auto e = value.get_object().get(obj)) return e == simdjson::INCORRECT_TYPE ? simdjson::SUCCESS : e;
  for (auto field : obj) {
    od::field f;
    if (auto e = std::move(field).get(f)) return e;
    if (f.key() == "rank") {
      std::int64_t rank = 0;
      auto e = f.value().get_int64().get(rank);
      if (e == simdjson::SUCCESS) out.rank = rank;
      else if (e != simdjson::INCORRECT_TYPE && e != simdjson::NUMBER_ERROR) return e;
    }
  }
  return simdjson::SUCCESS;
}

}  // namespace

Result<void> parse_trace(const std::string& name, const char* data, std::size_t len, RawTrace& out,
                         const Options& options) {
  od::parser parser;
  od::document doc;
  auto fail_at = [&](simdjson::error_code e, const char* where) -> Error {
    std::size_t offset = len;
    if (e == simdjson::INCOMPLETE_ARRAY_OR_OBJECT || e == simdjson::UNCLOSED_STRING) where = nullptr;
    if (where != nullptr && where >= data && where <= data + len) offset = static_cast<std::size_t>(where - data);
    return make_error(fmt::format("{}: invalid JSON at byte {}{}: {}", name, offset,
                                  offset >= len ? " (end of input)" : "", simdjson::error_message(e)));
  };
  auto location = [&]() -> const char* {
    const char* p = nullptr;
    if (doc.current_location().get(p) != simdjson::SUCCESS) return nullptr;
    return p;
  };
  if (auto e = parser.iterate(data, len, len + simdjson::SIMDJSON_PADDING).get(doc)) return fail_at(e, nullptr);
  od::object root;
  if (auto e = doc.get_object().get(root)) {
    if (e == simdjson::INCORRECT_TYPE) return ok_result();  // valid JSON, not an object: not a Kineto trace
    return fail_at(e, location());
  }
  Collector collector{out, {}};
  for (auto field : root) {
    od::field f;
    if (auto e = std::move(field).get(f)) return fail_at(e, location());
    od::raw_json_string key = f.key();
    if (key == "traceEvents") {
      od::array events;
      auto e = f.value().get_array().get(events);
      if (e == simdjson::INCORRECT_TYPE) continue;
      if (e) return fail_at(e, location());
      out.has_trace_events = true;
      for (auto item : events) {
        od::value v;
        if (auto e2 = std::move(item).get(v)) return fail_at(e2, location());
        EventFields ev;
        auto e3 = read_event(v, ev);
        if (e3 == simdjson::INCORRECT_TYPE) {
          ++out.event_count;
          continue;
        }
        if (e3) return fail_at(e3, location());
        collector.add(ev);
        if (options.progress && (out.event_count & 0xFFFF) == 0) {
          const char* p = location();
          if (p != nullptr) options.progress(static_cast<std::int64_t>(p - data), static_cast<std::int64_t>(len));
        }
      }
    } else if (key == "deviceProperties") {
      if (auto e = read_device_properties(f.value(), out)) return fail_at(e, location());
    } else if (key == "distributedInfo") {
      if (auto e = read_distributed_info(f.value(), out)) return fail_at(e, location());
    }
  }
  if (const char* rest = location(); rest != nullptr && rest < data + len)
    return fail_at(simdjson::TRAILING_CONTENT, rest);
  return ok_result();
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/// Restores one byte of the buffer when it goes out of scope.
struct ByteGuard {
  char* at;
  char saved;
  ByteGuard(char* p, char c) : at(p), saved(*p) { *p = c; }
  ~ByteGuard() { *at = saved; }
  ByteGuard(const ByteGuard&) = delete;
  ByteGuard& operator=(const ByteGuard&) = delete;
};

constexpr std::size_t kChunkBytes = 1u << 20;

/// Parses the events of data[begin, end) (a run of complete events separated by commas) as one array.
/// Temporarily writes '[' at begin - 1 and ']' at end. False when it does not parse.
bool parse_event_run(od::parser& parser, char* data, std::size_t begin, std::size_t end, Collector& collector) {
  ByteGuard open(data + begin - 1, '[');
  ByteGuard close(data + end, ']');
  od::document doc;
  const std::size_t n = end + 1 - (begin - 1);
  if (parser.iterate(data + begin - 1, n, n + simdjson::SIMDJSON_PADDING).get(doc)) return false;
  od::array events;
  if (doc.get_array().get(events)) return false;
  for (auto item : events) {
    od::value v;
    if (std::move(item).get(v)) return false;
    EventFields ev;
    auto e = read_event(v, ev);
    if (e == simdjson::INCORRECT_TYPE) {
      ++collector.out.event_count;
      continue;
    }
    if (e) return false;
    collector.add(ev);
  }
  const char* rest = nullptr;
  return doc.current_location().get(rest) != simdjson::SUCCESS;  // nothing after the closing ']'
}

}  // namespace

/// Fast path for well-formed files: parses traceEvents in runs of ~1 MB, so that simdjson's index
/// covers one run at a time (peak memory stays close to the file size), and the rest of the document
/// (metadata before and after the array) separately. False (and `out` unusable) when anything does not
/// look as expected; the caller then parses the whole document the ordinary way.
bool parse_chunked(const std::string& name, char* data, std::size_t len, RawTrace& out, const Options& options) {
  const std::string_view text(data, len);
  const std::size_t key = text.find("\"traceEvents\"");
  if (key == std::string_view::npos) return false;
  std::size_t p = key + 13;
  while (p < len && is_ws(data[p])) ++p;
  if (p >= len || data[p] != ':') return false;
  ++p;
  while (p < len && is_ws(data[p])) ++p;
  if (p >= len || data[p] != '[') return false;
  const std::size_t array_open = p;
  od::parser parser;
  if (parser.allocate(kChunkBytes * 2) != simdjson::SUCCESS) return false;
  Collector collector{out, {}};
  std::size_t pos = array_open + 1;  // first byte after '[' or after a separating ','
  std::size_t array_close = std::string_view::npos;
  while (true) {
    std::size_t q = pos;
    while (q < len && is_ws(data[q])) ++q;
    if (q >= len) return false;
    if (data[q] == ']') {
      array_close = q;
      break;
    }
    // Candidate run ends: a '}' followed by ',' then '{' (between two events), at least kChunkBytes on;
    // else the '}' right before the array's closing ']'.
    // In the last stretch of the array only a '}' followed by the closing ']' ends the run.
    const bool tail = pos + kChunkBytes >= len;
    std::size_t search = tail ? pos : pos + kChunkBytes;
    bool done = false;
    int failures = 0;
    while (!done) {
      std::size_t end = text.find('}', search);
      if (end == std::string_view::npos) return false;
      std::size_t r = end + 1;
      while (r < len && is_ws(data[r])) ++r;
      if (r >= len) return false;
      bool candidate = data[r] == ']';
      if (!tail && data[r] == ',') {
        std::size_t t = r + 1;
        while (t < len && is_ws(data[t])) ++t;
        candidate = t < len && data[t] == '{';
      }
      if (!candidate) {
        search = end + 1;
        continue;
      }
      const auto n_act = out.activities.size(), n_launch = out.launches.size(), n_span = out.spans.size();
      const auto n_events = out.event_count, n_skipped = out.skipped_events;
      if (!parse_event_run(parser, data, pos, end + 1, collector)) {
        out.activities.resize(n_act);
        out.launches.resize(n_launch);
        out.spans.resize(n_span);
        out.event_count = n_events;
        out.skipped_events = n_skipped;
        if (++failures > 64) return false;
        search = end + 1;
        continue;
      }
      done = true;
      if (options.progress) options.progress(static_cast<std::int64_t>(end), static_cast<std::int64_t>(len));
      if (data[r] == ']') {
        array_close = r;
      } else {
        pos = r + 1;
      }
    }
    if (array_close != std::string_view::npos) break;
  }
  // The rest of the document with an empty traceEvents array: metadata, and a check of the structure.
  std::string rest;
  rest.reserve(array_open + 2 + (len - array_close));
  rest.append(data, array_open + 1);
  rest.append(data + array_close, len - array_close);
  simdjson::padded_string padded(rest);
  RawTrace meta;
  if (!parse_trace(name, padded.data(), padded.size(), meta, Options{})) return false;
  if (!meta.has_trace_events) return false;
  out.rank = meta.rank;
  out.device_names = std::move(meta.device_names);
  out.has_trace_events = true;
  return true;
}

Result<void> parse_trace_repairing(const std::string& name, char* data, std::size_t len, RawTrace& out,
                                   const Options& options) {
  {
    RawTrace chunked;
    if (parse_chunked(name, data, len, chunked, options)) {
      out = std::move(chunked);
      return ok_result();
    }
  }
  auto first = parse_trace(name, data, len, out, options);
  if (first || !options.partial || out.has_trace_events) return first;
  // The document failed before any event was read (typically a truncated file whose brackets never
  // close): cut after the last "}," that leaves a parseable prefix and close the array and the object.
  std::string_view text(data, len);
  std::size_t pos = len;
  Options quiet = options;
  quiet.progress = nullptr;
  for (int attempt = 0; attempt < 256 && pos > 0; ++attempt) {
    pos = text.rfind("},", pos - 1);
    if (pos == std::string_view::npos) break;
    data[pos + 1] = ']';
    data[pos + 2] = '}';
    RawTrace repaired;
    if (parse_trace(name, data, pos + 3, repaired, quiet) && repaired.has_trace_events) {
      out = std::move(repaired);
      return first;  // still the original error: the caller labels the result partial
    }
  }
  return first;
}

std::string unescape_json(std::string_view raw) {
  if (raw.find('\\') == std::string_view::npos) return std::string(raw);
  std::string quoted;
  quoted.reserve(raw.size() + 2 + simdjson::SIMDJSON_PADDING);
  quoted.push_back('"');
  quoted.append(raw);
  quoted.push_back('"');
  simdjson::padded_string padded(quoted);
  od::parser parser;
  od::document doc;
  std::string_view s;
  if (parser.iterate(padded).get(doc) != simdjson::SUCCESS || doc.get_string().get(s) != simdjson::SUCCESS)
    return std::string(raw);
  return std::string(s);
}

}  // namespace detail

std::optional<std::int64_t> parse_us_to_ns(std::string_view token) {
  token = detail::trim(token);
  if (!token.empty() && token.front() == '"') return std::nullopt;
  if (token.empty()) return std::nullopt;
  bool negative = false;
  std::size_t i = 0;
  if (token[0] == '-') {
    negative = true;
    ++i;
  }
  const std::size_t int_begin = i;
  std::int64_t whole = 0;
  while (i < token.size() && token[i] >= '0' && token[i] <= '9') {
    if (whole > (INT64_MAX / 10000)) return std::nullopt;  // beyond ±9.2e15 µs
    whole = whole * 10 + (token[i] - '0');
    ++i;
  }
  if (i == int_begin) return std::nullopt;
  std::int64_t frac_ns = 0;
  if (i < token.size() && token[i] == '.') {
    ++i;
    const std::size_t frac_begin = i;
    int digits = 0;
    while (i < token.size() && token[i] >= '0' && token[i] <= '9') {
      if (digits < 3) {
        frac_ns = frac_ns * 10 + (token[i] - '0');
        ++digits;
      }
      ++i;
    }
    if (i == frac_begin) return std::nullopt;
    while (digits < 3) {
      frac_ns *= 10;
      ++digits;
    }
  }
  if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
    // Rare exponent form: fall back to a double (exact enough at these magnitudes).
    std::string copy(token);
    char* end = nullptr;
    errno = 0;
    const double us = std::strtod(copy.c_str(), &end);
    if (end != copy.c_str() + copy.size() || errno != 0 || !(us > -9.2e15 && us < 9.2e15)) return std::nullopt;
    return static_cast<std::int64_t>(std::llround(us * 1000.0));
  }
  if (i != token.size()) return std::nullopt;
  const std::int64_t ns = whole * 1000 + frac_ns;
  return negative ? -ns : ns;
}

Result<std::string> read_trace_text(const std::string& path) {
  detail::PaddedBuffer buf;
  GM_TRY_VOID(detail::load(path, buf));
  return std::string(buf.data(), buf.size());
}

namespace {

/// Parses into `raw`. With options.partial a damaged trace keeps what parsed and `fa` says so.
Result<void> parse_into(const std::string& name, char* data, std::size_t len, detail::RawTrace& raw,
                        const Options& options, FileAnalysis& fa) {
  auto r = detail::parse_trace_repairing(name, data, len, raw, options);
  if (!r) {
    if (!options.partial || !raw.has_trace_events) return r.error();
    fa.partial = true;
    fa.partial_error = r.error().message;
  }
  return {};
}

/// The analysis of a parsed trace.
FileAnalysis finish(const detail::RawTrace& raw, FileAnalysis fa) {
  fa.rank = raw.rank;
  fa.event_count = raw.event_count;
  fa.skipped_events = raw.skipped_events;
  if (!raw.has_trace_events) {
    fa.skipped = "not a Kineto trace (no traceEvents array)";
    return fa;
  }
  fa.devices = detail::analyze(raw);
  return fa;
}

}  // namespace

Result<FileAnalysis> analyze_buffer(const std::string& name, std::string_view json, const Options& options) {
  simdjson::padded_string padded(json);
  detail::RawTrace raw;
  FileAnalysis fa;
  fa.file = name;
  fa.bytes = static_cast<std::int64_t>(json.size());
  GM_TRY_VOID(parse_into(name, padded.data(), padded.size(), raw, options, fa));
  return finish(raw, std::move(fa));
}

Result<FileAnalysis> analyze_file(const std::string& path, const Options& options) {
  FileAnalysis fa;
  fa.file = path;
  detail::RawTrace raw;
  {
    detail::PaddedBuffer buf;
    GM_TRY_VOID(detail::load(path, buf));
    fa.bytes = static_cast<std::int64_t>(buf.size());
    GM_TRY_VOID(parse_into(path, buf.data(), buf.size(), raw, options, fa));
  }  // the JSON buffer is released before the analyses
  if (options.progress) options.progress(fa.bytes, fa.bytes);
  return finish(raw, std::move(fa));
}

Result<std::vector<FileAnalysis>> analyze_paths(const std::vector<std::string>& paths, const Options& options) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(p, ec)) {
        const std::string f = entry.path().string();
        if (entry.is_regular_file(ec) && (detail::has_suffix(f, ".json") || detail::has_suffix(f, ".json.gz")))
          found.push_back(f);
      }
      if (ec) return make_error(fmt::format("{}: cannot list folder: {}", p, ec.message()));
      std::sort(found.begin(), found.end());
      if (found.empty()) return make_error(fmt::format("{}: no .json or .json.gz files in this folder", p));
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      files.push_back(p);
    } else {
      return make_error(ErrorKind::not_found, fmt::format("{}: no such file or folder", p));
    }
  }
  std::vector<std::optional<Result<FileAnalysis>>> results(files.size());
  unsigned workers = options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  workers = static_cast<unsigned>(std::min<std::size_t>(workers, files.size()));
  std::atomic<std::size_t> next{0};
  auto work = [&]() {
    for (std::size_t i = next++; i < files.size(); i = next++) results[i].emplace(analyze_file(files[i], options));
  };
  std::vector<std::thread> pool;
  for (unsigned w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  std::vector<FileAnalysis> out;
  out.reserve(files.size());
  for (auto& r : results) {
    if (!*r) return r->error();
    out.push_back(std::move(r->value()));
  }
  return out;
}

}  // namespace gm::trace
