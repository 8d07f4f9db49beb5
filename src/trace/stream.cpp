// Windowed reading of JSON traces (docs/trace.md "Memory"): the file is read (and gzip-inflated) a window at
// a time; complete events of each window are parsed as one small document and only the compact tables are
// kept, so memory does not grow with the file. Anything unusual goes back to the whole-file reader, which
// owns every error message and the --partial repair.
#include <fcntl.h>
#include <isa-l/igzip_lib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trace/internal.h"
#include "trace/io.h"
#include "trace/scan.h"

namespace gm::trace::detail {
namespace {

constexpr std::size_t kCompressedChunk = 4u << 20;

/// A file's bytes, gzip members inflated (detected by the magic bytes), read on demand.
class ByteStream {
 public:
  ~ByteStream() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool open(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return false;
    struct stat st {};
    if (::fstat(fd_, &st) == 0) file_bytes_ = static_cast<std::int64_t>(st.st_size);
    if (!in_.reserve(kCompressedChunk)) return false;
    if (!fill_input()) return false;
    gzip_ = in_.size() - in_pos_ >= 2 && static_cast<unsigned char>(in_.data()[0]) == 0x1f &&
            static_cast<unsigned char>(in_.data()[1]) == 0x8b;
    if (gzip_) start_member();
    return true;
  }
  /// Reads up to `n` bytes into `dst`; 0 at the end. False on a read or gzip error (the whole-file reader
  /// then reports it).
  bool read(char* dst, std::size_t n, std::size_t& got) {
    const bool ok = read_some(dst, n, got);
    delivered_ += static_cast<std::int64_t>(got);
    return ok;
  }
  /// Bytes delivered by read() so far (the inflated size once the end was read).
  std::int64_t delivered() const { return delivered_; }
  /// File bytes consumed so far and the file's size, for progress.
  std::int64_t file_pos() const {
    return file_read_ - static_cast<std::int64_t>(gzip_ ? state_.avail_in : in_.size() - in_pos_);
  }
  std::int64_t file_bytes() const { return file_bytes_; }

 private:
  bool read_some(char* dst, std::size_t n, std::size_t& got) {
    got = 0;
    if (!gzip_) {
      while (got < n) {
        if (in_pos_ == in_.size() && n - got >= (64u << 10)) {
          // Large reads go straight into the caller's buffer (one copy, not two).
          const ssize_t r = ::read(fd_, dst + got, n - got);
          if (r < 0 && errno == EINTR) continue;
          if (r < 0) return false;
          if (r == 0) break;
          got += static_cast<std::size_t>(r);
          file_read_ += r;
          continue;
        }
        if (in_pos_ == in_.size() && !fill_input()) return false;
        if (in_pos_ == in_.size()) break;
        const std::size_t k = std::min(n - got, in_.size() - in_pos_);
        std::memcpy(dst + got, in_.data() + in_pos_, k);
        in_pos_ += k;
        got += k;
      }
      return true;
    }
    while (got < n && !gzip_done_) {
      if (state_.avail_in == 0) {
        if (!fill_input()) return false;
        state_.next_in = reinterpret_cast<std::uint8_t*>(in_.data() + in_pos_);
        state_.avail_in = static_cast<std::uint32_t>(in_.size() - in_pos_);
        in_pos_ = in_.size();
        if (state_.avail_in == 0) return !member_started_;  // the end of the file inside a member: damaged
      }
      state_.next_out = reinterpret_cast<std::uint8_t*>(dst + got);
      const auto room = static_cast<std::uint32_t>(std::min<std::size_t>(n - got, UINT32_MAX));
      state_.avail_out = room;
      if (isal_inflate(&state_) != ISAL_DECOMP_OK) return false;
      got += room - state_.avail_out;
      member_started_ = true;
      if (state_.block_state == ISAL_BLOCK_FINISH) {
        // Another member may follow (after zero padding).
        std::uint8_t* next = state_.next_in;
        std::uint32_t left = state_.avail_in;
        while (left > 0 && *next == 0) {
          ++next;
          --left;
        }
        if (left == 0) {
          if (!fill_input()) return false;
          while (in_pos_ < in_.size() && in_.data()[in_pos_] == 0) ++in_pos_;
          if (in_pos_ == in_.size()) {
            gzip_done_ = true;
            break;
          }
          next = reinterpret_cast<std::uint8_t*>(in_.data() + in_pos_);
          left = static_cast<std::uint32_t>(in_.size() - in_pos_);
          in_pos_ = in_.size();
        }
        start_member();
        state_.next_in = next;
        state_.avail_in = left;
      }
    }
    return true;
  }
  /// Refills the compressed (or plain) input buffer when it is used up; false on a read error.
  bool fill_input() {
    if (in_pos_ < in_.size()) return true;
    for (;;) {
      const ssize_t r = ::read(fd_, in_.data(), kCompressedChunk);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return false;
      in_.set_size(static_cast<std::size_t>(r));
      in_pos_ = 0;
      file_read_ += r;
      return true;
    }
  }
  void start_member() {
    isal_inflate_init(&state_);
    state_.crc_flag = ISAL_GZIP;
    state_.avail_in = 0;
    member_started_ = false;
  }

  int fd_ = -1;
  PaddedBuffer in_;
  std::size_t in_pos_ = 0;
  std::int64_t file_bytes_ = 0, file_read_ = 0, delivered_ = 0;
  bool gzip_ = false, gzip_done_ = false, member_started_ = false;
  inflate_state state_{};
};

/// After the opening quote: the byte after the closing quote, nullptr when the string goes past `end`.
const char* skip_string(const char* p, const char* end) {
  for (;;) {
    const auto* q = static_cast<const char*>(std::memchr(p, '"', static_cast<std::size_t>(end - p)));
    if (q == nullptr) return nullptr;
    const char* b = q;
    while (b > p && b[-1] == '\\') --b;
    if (((q - b) & 1) == 0) return q + 1;
    p = q + 1;
  }
}

enum class Scan { complete, incomplete, invalid };

/// One JSON value starting at `p` (no leading whitespace): its end in `value_end`.
Scan scan_value(const char* p, const char* end, const char*& value_end) {
  if (p >= end) return Scan::incomplete;
  if (*p == '"') {
    value_end = skip_string(p + 1, end);
    return value_end != nullptr ? Scan::complete : Scan::incomplete;
  }
  if (*p != '{' && *p != '[') {
    const char* q = p;
    while (q < end && !is_json_ws(*q) && *q != ',' && *q != '}' && *q != ']') {
      if (*q == '{' || *q == '[' || *q == '"' || *q == ':') return Scan::invalid;
      ++q;
    }
    if (q == end) return Scan::incomplete;
    value_end = q;
    return q > p ? Scan::complete : Scan::invalid;
  }
  int depth = 0;
  for (const char* q = p; q < end; ++q) {
    switch (*q) {
      case '"':
        q = skip_string(q + 1, end);
        if (q == nullptr) return Scan::incomplete;
        --q;
        break;
      case '{':
      case '[':
        ++depth;
        break;
      case '}':
      case ']':
        if (--depth == 0) {
          value_end = q + 1;
          return Scan::complete;
        }
        if (depth < 0) return Scan::invalid;
        break;
      default:
        break;
    }
  }
  return Scan::incomplete;
}

/// The window of file bytes being scanned, refilled from the stream.
struct Window {
  ByteStream& in;
  PaddedBuffer buf;
  std::size_t pos = 0;  // next byte to scan
  bool eof = false;
  bool failed = false;

  const char* cur() const { return buf.data() + pos; }
  const char* end() const { return buf.data() + buf.size(); }
  /// Keeps [keep, size) and reads more after it (growing the window when `keep` is its start); false at the
  /// end of the file or on a read error.
  bool more(std::size_t keep) {
    if (eof) return false;
    const std::size_t kept = buf.size() - keep;
    std::memmove(buf.data(), buf.data() + keep, kept);
    pos -= keep;
    if (kept == buf.capacity() && !buf.reserve(buf.capacity() * 2)) {
      failed = true;
      return false;
    }
    std::size_t got = 0;
    if (!in.read(buf.data() + kept, buf.capacity() - kept, got)) {
      failed = true;
      return false;
    }
    buf.set_size(kept + got);
    if (got == 0) eof = true;
    return got > 0;
  }
  /// Skips whitespace, reading more as needed; false at the end of the file.
  bool skip_ws() {
    for (;;) {
      while (pos < buf.size() && is_json_ws(buf.data()[pos])) ++pos;
      if (pos < buf.size()) return true;
      if (!more(pos)) return false;
    }
  }
  /// Scans the value at pos (after whitespace), reading more as needed: its [begin, end) in the window.
  Scan value(std::size_t& begin, std::size_t& value_end) {
    if (!skip_ws()) return Scan::invalid;
    for (;;) {
      const char* e = nullptr;
      const Scan s = scan_value(cur(), this->end(), e);
      if (s == Scan::complete) {
        begin = pos;
        value_end = static_cast<std::size_t>(e - buf.data());
        return s;
      }
      if (s == Scan::invalid || !more(pos)) return Scan::invalid;
    }
  }
};

/// Parses `prefix + text + suffix` as one small document into `out`; false on any error.
bool parse_piece(const std::string& name, const char* prefix, const char* text, std::size_t len,
                 const char* suffix, PaddedBuffer& doc, JsonParser& parser, RawTrace& out) {
  const std::size_t a = std::strlen(prefix), c = std::strlen(suffix);
  if (!doc.reserve(a + len + c)) return false;
  std::memcpy(doc.data(), prefix, a);
  std::memcpy(doc.data() + a, text, len);
  std::memcpy(doc.data() + a + len, suffix, c);
  doc.set_size(a + len + c);
  return parse_trace(name, doc.data(), doc.size(), out, Options{}, parser).ok();
}

/// Appends the tables of `part` (parsed from a later stretch of the same file) to `out`, re-interning its
/// strings: ids come out as if `out` had parsed both stretches itself, so the merge is deterministic.
void merge_tables(RawTrace& out, RawTrace& part) {
  auto remap = [](Interner& into, const Interner& from) {
    std::vector<std::uint32_t> ids(from.size());
    for (std::size_t i = 0; i < from.size(); ++i) ids[i] = into.id(from.str(static_cast<std::uint32_t>(i)));
    return ids;
  };
  const auto names = remap(out.names, part.names);
  const auto devices = remap(out.devices, part.devices);
  const auto threads = remap(out.threads, part.threads);
  const auto streams = remap(out.streams, part.streams);
  const std::size_t first_activity = out.activities.size();
  // Capacity grows geometrically (reserving just what this batch adds would copy the table every batch).
  auto grow = [](auto& into, std::size_t more) {
    if (into.capacity() < into.size() + more) into.reserve(std::max(into.size() + more, 2 * into.capacity()));
  };
  grow(out.activities, part.activities.size());
  grow(out.launches, part.launches.size());
  grow(out.spans, part.spans.size());
  for (Activity a : part.activities) {
    a.name = names[a.name];
    a.device = devices[a.device];
    a.stream = streams[a.stream];
    out.activities.push_back(a);
  }
  for (Launch l : part.launches) {
    l.thread = threads[l.thread];
    out.launches.push_back(l);
  }
  for (Span sp : part.spans) {
    sp.thread = sp.kind == SpanKind::gpu_annotation ? devices[sp.thread] : threads[sp.thread];
    sp.name = names[sp.name];
    out.spans.push_back(sp);
  }
  for (RawCollective c : part.collectives) {
    c.activity += first_activity;
    c.group = names[c.group];
    c.name = names[c.name];
    out.collectives.push_back(c);
  }
  out.syncs.insert(out.syncs.end(), part.syncs.begin(), part.syncs.end());
  out.event_count += part.event_count;
  out.skipped_events += part.skipped_events;
  if (part.has_trace_events) {
    out.has_trace_events = true;
    out.format = part.format;
  } else if (!out.has_trace_events && !part.not_a_trace.empty()) {
    out.not_a_trace = part.not_a_trace;
  }
}

/// Parses batches of events on worker threads; their tables are merged into `out` in submission order, so
/// the result is the one of parsing them one after the other. At most workers + 1 batches are held, and
/// their buffers are reused.
class BatchPool {
 public:
  BatchPool(const std::string& name, unsigned workers, RawTrace& out) : name_(name), out_(out) {
    for (unsigned i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
    limit_ = workers + 1;
  }
  ~BatchPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  /// Queues a whole small document (taken from `doc`, which gets an empty buffer back); false when an
  /// earlier batch failed.
  bool submit(PaddedBuffer& doc) {
    while (slots_.size() >= limit_)
      if (!merge_oldest()) return false;
    auto slot = std::make_unique<Slot>();
    slot->doc.swap(doc);
    {
      std::lock_guard lock(mu_);
      queue_.push_back(slot.get());
      if (!spare_.empty()) {
        doc.swap(spare_.back());
        spare_.pop_back();
      }
    }
    slots_.push_back(std::move(slot));
    work_cv_.notify_one();
    return true;
  }
  /// Waits for every batch and merges them; false when one did not parse.
  bool finish() {
    while (!slots_.empty())
      if (!merge_oldest()) return false;
    return true;
  }

 private:
  struct Slot {
    PaddedBuffer doc;
    RawTrace tables;
    bool done = false, ok = false;
  };
  bool merge_oldest() {
    Slot* s = slots_.front().get();
    {
      std::unique_lock lock(mu_);
      done_cv_.wait(lock, [&] { return s->done; });
    }
    const bool ok = s->ok;
    if (ok) merge_tables(out_, s->tables);
    slots_.pop_front();
    return ok;
  }
  void work() {
    JsonParser parser;
    for (;;) {
      Slot* s = nullptr;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        s = queue_.front();
        queue_.pop_front();
      }
      const bool ok = parse_trace(name_, s->doc.data(), s->doc.size(), s->tables, Options{}, parser).ok();
      {
        std::lock_guard lock(mu_);
        spare_.emplace_back();
        spare_.back().swap(s->doc);  // the text is not needed once parsed: its buffer serves a later batch
        s->ok = ok;
        s->done = true;
      }
      done_cv_.notify_all();
    }
  }

  const std::string& name_;
  RawTrace& out_;
  std::size_t limit_ = 1;
  std::deque<std::unique_ptr<Slot>> slots_;  // submitted, not merged yet (main thread only)
  std::deque<Slot*> queue_;                  // waiting for a worker
  std::vector<PaddedBuffer> spare_;          // buffers of parsed batches
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  bool stop_ = false;
};

/// One windowed pass; false when the file needs the whole-file reader.
bool windowed_pass(const std::string& path, RawTrace& out, const Options& options, std::size_t window_bytes,
                   unsigned threads, std::int64_t& json_bytes) {
  ByteStream stream;
  if (!stream.open(path)) return false;
  Window w{stream, {}};
  if (!w.buf.reserve(window_bytes)) return false;
  w.buf.set_size(0);
  if (!w.more(0) && w.buf.size() == 0) return false;
  if (!w.skip_ws()) return false;
  const char root = *w.cur();
  if (root != '{' && root != '[') return false;
  ++w.pos;
  PaddedBuffer doc;
  JsonParser parser;
  const bool legacy = root == '[';
  const char* events_prefix = legacy ? "[" : "{\"traceEvents\":[";
  const char* events_suffix = legacy ? "]" : "]}";
  std::int64_t last_progress = 0;

  // The elements of an event array (from after its '[' to its ']'), a window's worth at a time. The bytes
  // are read straight into a batch buffer after the prefix that makes them a document; the element scanner
  // finds the last comma between two events, and what comes before it is parsed as one document (here, or
  // from the second batch on, on a worker while this thread reads on); what follows it starts the next batch.
  std::unique_ptr<BatchPool> pool;
  auto events = [&]() -> bool {
    const std::size_t prefix_len = std::strlen(events_prefix), suffix_len = std::strlen(events_suffix);
    std::size_t capacity = window_bytes;  // of a batch's text; doubled for an event larger than the window
    auto start_batch = [&](PaddedBuffer& b, const char* text, std::size_t len) -> bool {
      if (!b.reserve(prefix_len + std::max(capacity, len) + suffix_len)) return false;
      std::memcpy(b.data(), events_prefix, prefix_len);
      std::memcpy(b.data() + prefix_len, text, len);
      b.set_size(prefix_len + len);
      return true;
    };
    // Ends the batch's text at `end` and parses it.
    auto parse_batch = [&](PaddedBuffer& b, std::size_t end, bool last) -> bool {
      std::memcpy(b.data() + end, events_suffix, suffix_len);
      b.set_size(end + suffix_len);
      if (threads > 1 && !pool && !last) pool = std::make_unique<BatchPool>(path, threads, out);
      if (pool) return pool->submit(b);
      return parse_trace(path, b.data(), b.size(), out, Options{}, parser).ok();
    };
    PaddedBuffer batch, next;
    if (!start_batch(batch, w.cur(), w.buf.size() - w.pos)) return false;
    w.pos = w.buf.size();
    ElementScanState state;
    std::size_t scanned = prefix_len, last_comma = ElementScan::npos;
    for (;;) {
      const ElementScan r = scan_elements(batch.data() + scanned, batch.size() - scanned, state);
      if (r.last_comma != ElementScan::npos) last_comma = scanned + r.last_comma;
      if (r.array_end != ElementScan::npos) {
        const std::size_t end = scanned + r.array_end, rest = batch.size() - end - 1;
        // The scan counts depth, not bracket kinds: a '}' that closes the array (an unclosed '{' shut by a
        // ']' inside it) is malformed JSON, and the whole-file reader says where.
        if (batch.data()[end] != ']') return false;
        // The rest of the file after the ']' goes back to the window.
        if (!w.buf.reserve(std::max(rest, window_bytes))) return false;
        std::memcpy(w.buf.data(), batch.data() + end + 1, rest);
        w.buf.set_size(rest);
        w.pos = 0;
        return parse_batch(batch, end, true) && (!pool || pool->finish());
      }
      scanned = batch.size();
      const bool full = batch.size() - prefix_len >= capacity;
      if (full && last_comma != ElementScan::npos) {
        const std::size_t tail = batch.size() - last_comma - 1;
        if (!start_batch(next, batch.data() + last_comma + 1, tail)) return false;
        if (!parse_batch(batch, last_comma, false)) return false;
        batch.swap(next);
        capacity = window_bytes;
        // The scan state is the one at the end of the tail, which now ends the new batch.
        scanned = batch.size();
        last_comma = ElementScan::npos;
        if (options.progress && stream.file_pos() - last_progress > (64 << 20)) {
          last_progress = stream.file_pos();
          options.progress(stream.file_pos(), stream.file_bytes());
        }
        continue;
      }
      while (batch.size() - prefix_len >= capacity) capacity *= 2;  // no comma between events yet: grow
      if (!batch.reserve(prefix_len + capacity + suffix_len)) return false;
      std::size_t got = 0;
      if (!stream.read(batch.data() + batch.size(), prefix_len + capacity - batch.size(), got)) return false;
      if (got == 0) return false;  // the file ends inside the event array: the whole-file reader says how
      batch.set_size(batch.size() + got);
    }
  };

  if (legacy) {
    if (!events()) return false;
    if (!out.has_trace_events && out.event_count == 0) out.not_a_trace = "an empty JSON array (no events)";
  } else {
    bool first = true;
    bool saw_events = false;
    for (;;) {
      if (!w.skip_ws()) return false;
      if (*w.cur() == '}') {
        ++w.pos;
        break;
      }
      if (!first) {
        if (*w.cur() != ',') return false;
        ++w.pos;
      }
      first = false;
      std::size_t kb = 0, ke = 0;
      if (w.value(kb, ke) != Scan::complete || w.buf.data()[kb] != '"') return false;
      const std::string key(w.buf.data() + kb, ke - kb);
      w.pos = ke;
      if (!w.skip_ws() || *w.cur() != ':') return false;
      ++w.pos;
      if (!w.skip_ws()) return false;
      if (key == "\"traceEvents\"" && *w.cur() == '[') {
        ++w.pos;
        saw_events = true;
        if (!events()) return false;
        continue;
      }
      // Any other member (deviceProperties, distributedInfo, ...; before or after the events) is parsed on
      // its own; a traceEvents that is not an array goes to the whole-file reader.
      if (key == "\"traceEvents\"") return false;
      std::size_t vb = 0, ve = 0;
      if (w.value(vb, ve) != Scan::complete) return false;
      const std::string member = "{" + key + ":";
      if (!parse_piece(path, member.c_str(), w.buf.data() + vb, ve - vb, "}", doc, parser, out)) return false;
      w.pos = ve;
    }
    if (!saw_events) return false;  // not a Kineto trace: the whole-file reader says what it is
    out.has_trace_events = true;
    out.format = "kineto_json";
    out.not_a_trace.clear();
  }
  // Only whitespace may follow the root value.
  if (w.skip_ws() || w.failed) return false;
  json_bytes = stream.delivered();
  return true;
}

}  // namespace

Result<bool> parse_json_windowed(const std::string& path, RawTrace& out, const Options& options,
                                 std::size_t window_bytes, unsigned threads, std::int64_t& json_bytes) {
  return windowed_pass(path, out, options, std::max<std::size_t>(window_bytes, 1), threads, json_bytes);
}

}  // namespace gm::trace::detail
