// Windowed reading of JSON traces (docs/trace.md "Memory"): the file is read (and gzip-inflated) a window at
// a time; complete events of each window are parsed as one small document and only the compact tables are
// kept, so memory does not grow with the file. Anything unusual goes back to the whole-file reader, which
// owns every error message and the --partial repair.
#include <fcntl.h>
#include <isa-l/igzip_lib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
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
    got = 0;
    if (!gzip_) {
      while (got < n) {
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
  /// File bytes consumed so far and the file's size, for progress.
  std::int64_t file_pos() const {
    return file_read_ - static_cast<std::int64_t>(gzip_ ? state_.avail_in : in_.size() - in_pos_);
  }
  std::int64_t file_bytes() const { return file_bytes_; }

 private:
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
  std::int64_t file_bytes_ = 0, file_read_ = 0;
  bool gzip_ = false, gzip_done_ = false, member_started_ = false;
  inflate_state state_{};
};

bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

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
    while (q < end && !is_ws(*q) && *q != ',' && *q != '}' && *q != ']') {
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

/// True when [p, end) is one or more complete JSON values separated by commas (nothing after the last),
/// scanned from the state "outside any string, depth 0".
bool complete_elements(const char* p, const char* end) {
  for (;;) {
    while (p < end && is_ws(*p)) ++p;
    const char* e = nullptr;
    if (scan_value(p, end, e) != Scan::complete) return false;
    p = e;
    while (p < end && is_ws(*p)) ++p;
    if (p == end) return true;
    if (*p != ',') return false;
    ++p;
  }
}

/// The end (after its '}') of the last "}, {" of [begin, end) — a likely boundary between two events,
/// checked later by complete_elements — or 0 when there is none.
std::size_t last_event_gap(const char* data, std::size_t begin, std::size_t end) {
  for (std::size_t i = end; i > begin;) {
    --i;
    if (data[i] != '{') continue;
    std::size_t j = i;
    while (j > begin && is_ws(data[j - 1])) --j;
    if (j == begin || data[j - 1] != ',') continue;
    --j;
    while (j > begin && is_ws(data[j - 1])) --j;
    if (j > begin && data[j - 1] == '}') return j;
  }
  return 0;
}

/// The window of file bytes being scanned, refilled from the stream.
struct Window {
  ByteStream& in;
  PaddedBuffer buf;
  std::size_t pos = 0;     // next byte to scan
  std::size_t offset = 0;  // file offset of buf[0] (inflated bytes)
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
    offset += keep;
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
      while (pos < buf.size() && is_ws(buf.data()[pos])) ++pos;
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
  out.activities.reserve(out.activities.size() + part.activities.size());
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
/// the result is the one of parsing them one after the other. At most workers + 1 batches are held.
class BatchPool {
 public:
  BatchPool(const std::string& name, unsigned workers, RawTrace& out, bool& guess_failed)
      : name_(name), out_(out), guess_failed_out_(guess_failed) {
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
    if (guess_failed_) guess_failed_out_ = true;
  }
  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  /// Queues `prefix + text + suffix` (copied); false when an earlier batch failed or memory ran out. With
  /// `check`, the worker first checks that `text` is complete elements (the cut was guessed).
  bool submit(const char* prefix, const char* text, std::size_t len, const char* suffix, bool check = false) {
    while (slots_.size() >= limit_)
      if (!merge_oldest()) return false;
    auto slot = std::make_unique<Slot>();
    const std::size_t a = std::strlen(prefix), c = std::strlen(suffix);
    if (!slot->doc.reserve(a + len + c)) return false;
    std::memcpy(slot->doc.data(), prefix, a);
    std::memcpy(slot->doc.data() + a, text, len);
    std::memcpy(slot->doc.data() + a + len, suffix, c);
    slot->doc.set_size(a + len + c);
    slot->check = check;
    slot->text_begin = a;
    slot->text_len = len;
    {
      std::lock_guard lock(mu_);
      queue_.push_back(slot.get());
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
  /// A guessed cut was found not to be between two events.
  bool guess_failed() const { return guess_failed_; }

 private:
  struct Slot {
    PaddedBuffer doc;
    RawTrace tables;
    bool check = false;
    std::size_t text_begin = 0, text_len = 0;
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
      const char* text = s->doc.data() + s->text_begin;
      bool ok = !s->check || complete_elements(text, text + s->text_len);
      if (!ok) guess_failed_ = true;
      ok = ok && parse_trace(name_, s->doc.data(), s->doc.size(), s->tables, Options{}, parser).ok();
      {
        PaddedBuffer released;  // the text is not needed once parsed
        released.swap(s->doc);
      }
      {
        std::lock_guard lock(mu_);
        s->ok = ok;
        s->done = true;
      }
      done_cv_.notify_all();
    }
  }

  const std::string& name_;
  RawTrace& out_;
  bool& guess_failed_out_;  // set when the pool ends
  std::size_t limit_ = 1;
  std::deque<std::unique_ptr<Slot>> slots_;  // submitted, not merged yet (main thread only)
  std::deque<Slot*> queue_;                  // waiting for a worker
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  bool stop_ = false;
  std::atomic<bool> guess_failed_{false};
};

/// One windowed pass; `guess_failed` when a guessed cut between events was wrong.
bool windowed_pass(const std::string& path, RawTrace& out, const Options& options, std::size_t window_bytes,
                   unsigned threads, std::int64_t& json_bytes, bool& guess_failed) {
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

  // The elements of an event array (from after its '[' to its ']'), parsed a window's worth at a time.
  // With more than one thread, batches are parsed on workers while this thread reads and scans on.
  // The workers start with the second window (a file of one window is parsed here).
  std::unique_ptr<BatchPool> pool;
  auto events = [&]() -> bool {
    std::size_t batch_begin = SIZE_MAX, batch_end = 0;
    auto flush = [&](bool last) -> bool {
      if (batch_begin == SIZE_MAX) return true;
      if (threads > 1 && !pool && !last) pool = std::make_unique<BatchPool>(path, threads, out, guess_failed);
      const char* text = w.buf.data() + batch_begin;
      const std::size_t len = batch_end - batch_begin;
      const bool ok = pool ? pool->submit(events_prefix, text, len, events_suffix)
                           : parse_piece(path, events_prefix, text, len, events_suffix, doc, parser, out);
      batch_begin = SIZE_MAX;
      if (options.progress && stream.file_pos() - last_progress > (64 << 20)) {
        last_progress = stream.file_pos();
        options.progress(stream.file_pos(), stream.file_bytes());
      }
      return ok;
    };
    // Whitespace between elements; the window moves only after the batch so far is parsed.
    auto ws = [&]() -> bool {
      for (;;) {
        while (w.pos < w.buf.size() && is_ws(w.buf.data()[w.pos])) ++w.pos;
        if (w.pos < w.buf.size()) return true;
        if (!flush(false) || !w.more(w.pos)) return false;
      }
    };
    bool first = true;
    for (;;) {
      if (!ws()) return false;
      if (*w.cur() == ']') {
        ++w.pos;
        return flush(true) && (!pool || pool->finish());
      }
      if (!first) {
        if (*w.cur() != ',') return false;
        ++w.pos;
        if (!ws()) return false;
      }
      first = false;
      // With workers and more of the file to come, the events up to the last "}, {" of the window go to a
      // worker unscanned: the worker checks the cut by scanning them (in parallel), and a wrong cut (a
      // string holding "}, {") reads the file again on one thread.
      if (threads > 1 && !w.eof) {
        const std::size_t cut = last_event_gap(w.buf.data(), w.pos, w.buf.size());
        if (cut > w.pos) {
          if (!flush(false)) return false;
          if (!pool) pool = std::make_unique<BatchPool>(path, threads, out, guess_failed);
          if (!pool->submit(events_prefix, w.cur(), cut - w.pos, events_suffix, true)) return false;
          w.pos = cut;
          continue;
        }
      }
      const char* e = nullptr;
      Scan s = scan_value(w.cur(), w.end(), e);
      if (s == Scan::incomplete) {
        // The window ends inside this element: parse what is complete, keep the element, read more.
        if (!flush(false) || (pool && pool->guess_failed())) return false;
        const std::size_t start = w.pos;
        w.more(start);
        if (w.failed) return false;
        s = scan_value(w.cur(), w.end(), e);
        while (s == Scan::incomplete && w.more(w.pos)) s = scan_value(w.cur(), w.end(), e);
      }
      if (s != Scan::complete) return false;
      if (batch_begin == SIZE_MAX) batch_begin = w.pos;
      w.pos = static_cast<std::size_t>(e - w.buf.data());
      batch_end = w.pos;
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
  json_bytes = static_cast<std::int64_t>(w.offset + w.buf.size());
  return true;
}

}  // namespace

Result<bool> parse_json_windowed(const std::string& path, RawTrace& out, const Options& options,
                                 std::size_t window_bytes, unsigned threads, std::int64_t& json_bytes) {
  bool guess_failed = false;
  if (windowed_pass(path, out, options, window_bytes, threads, json_bytes, guess_failed)) return true;
  if (!guess_failed) return false;
  out = RawTrace{};
  return windowed_pass(path, out, options, window_bytes, 1, json_bytes, guess_failed);
}

}  // namespace gm::trace::detail
