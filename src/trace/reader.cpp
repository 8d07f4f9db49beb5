// Streaming JSON reader (Kineto traceEvents objects and legacy bare event arrays): one simdjson
// On-Demand pass over a padded buffer, compact tables of only what the analyses need.
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "trace/internal.h"
#include "trace/io.h"
#include "trace/scan.h"

namespace gm::trace {
namespace detail {
namespace {

namespace od = simdjson::ondemand;
static_assert(kPaddingBytes >= simdjson::SIMDJSON_PADDING);

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t'))
    s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t'))
    s.remove_prefix(1);
  return s;
}

/// Contents of a string token without quotes; the token itself if it is not a string.
std::string_view unquote(std::string_view token) {
  token = trim(token);
  if (token.size() >= 2 && token.front() == '"' && token.back() == '"')
    return token.substr(1, token.size() - 2);
  return token;
}

}  // namespace

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

void add_event(RawTrace& out, const DecodedEvent& ev) {
  const Cat cat = ev.cat;
  if (cat == Cat::kernel || cat == Cat::memory) {
    if (!ev.ts || !ev.dur || *ev.dur < 0) {
      ++out.skipped_events;
      return;
    }
    Klass klass = Klass::compute;
    if (cat == Cat::memory)
      klass = Klass::memory;
    else if (ev.name.starts_with("nccl") || ev.collective)
      klass = Klass::communication;
    out.activities.push_back(Activity{*ev.ts, *ev.dur, ev.correlation, out.names.id(ev.name),
                                      out.devices.id(ev.device), out.streams.id(ev.stream), klass});
    if (cat == Cat::kernel && !ev.group.empty() && !ev.collective_name.empty())
      out.collectives.push_back(RawCollective{out.activities.size() - 1, out.names.id(ev.group),
                                              out.names.id(ev.collective_name), ev.nelems.value_or(-1),
                                              ev.seq.value_or(-1), ev.group_size.value_or(-1)});
    return;
  }
  if (!ev.ts || cat == Cat::other) return;
  if (cat == Cat::runtime) {
    if (ev.correlation >= 0)
      out.launches.push_back(Launch{ev.correlation, *ev.ts, out.threads.id(ev.thread),
                                    ev.name.ends_with("GraphLaunch") || ev.name.ends_with("GraphLaunch_v2")});
    // Calls that block the host until the GPU is done: cuda{Device,Stream,Event}Synchronize and the
    // synchronous cudaMemcpy (tensor.item(), .cpu(), printing a CUDA tensor, torch.cuda.synchronize()).
    if (ev.dur && *ev.dur > 0 &&
        (ev.name.find("Synchronize") != std::string_view::npos || ev.name == "cudaMemcpy" ||
         ev.name == "hipMemcpy"))
      out.syncs.emplace_back(*ev.ts, *ev.ts + *ev.dur);
    return;
  }
  if (!ev.dur || *ev.dur < 0) return;
  SpanKind kind = SpanKind::op;
  std::uint32_t thread = 0;
  if (ev.name.starts_with("ProfilerStep#")) {
    kind = SpanKind::step;
  } else if (cat == Cat::annotation) {
    kind = SpanKind::annotation;
  } else if (cat == Cat::gpu_annotation) {
    kind = SpanKind::gpu_annotation;
    thread = out.devices.id(ev.device);
  }
  if (kind != SpanKind::gpu_annotation) thread = out.threads.id(ev.thread);
  const OpDtype dtype = ev.input_type.empty() ? OpDtype::unknown : op_dtype(ev.input_type);
  out.spans.push_back(Span{*ev.ts, *ev.ts + *ev.dur, thread, out.names.id(ev.name), kind, dtype});
}

namespace {

struct EventFields : EventArgs {
  std::string_view ph, cat, name, pid, tid, ts, dur;
};

/// A non-negative integer token (at most 18 digits), or nullopt.
std::optional<std::int64_t> small_uint(std::string_view tok) {
  tok = trim(tok);
  if (tok.empty() || tok.size() >= 19) return std::nullopt;
  std::int64_t v = 0;
  for (char c : tok) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

/// The contents of a JSON string value (still escaped), or "" when the value is not a string.
std::string_view string_token(od::value v) {
  std::string_view tok = trim(v.raw_json_token());
  if (tok.size() < 2 || tok.front() != '"' || tok.back() != '"') return {};
  return tok.substr(1, tok.size() - 2);
}

/// True when a raw key (the bytes after its opening quote) is exactly `lit`. Keys are compared as written
/// (escapes are not decoded), as simdjson's own comparison does; the bytes read stay inside the padding.
template <std::size_t N>
bool key_is(const char* raw, const char (&lit)[N]) {
  return raw[N - 1] == '"' && std::memcmp(raw, lit, N - 1) == 0;
}

simdjson::error_code read_args(od::value args, EventFields& ev) {
  od::object obj;
  if (auto e = args.get_object().get(obj)) return e == simdjson::INCORRECT_TYPE ? simdjson::SUCCESS : e;
  for (auto field : obj) {
    od::field f;
    if (auto e = std::move(field).get(f)) return e;
    const char* key = f.key().raw();
    // Most argument keys are rejected on their first byte.
    switch (key[0]) {
      case 'c':
      case 'C':
        if (key_is(key, "correlation")) {
          if (auto v = small_uint(f.value().raw_json_token())) ev.correlation = *v;
        } else if (key_is(key, "Collective name") || key_is(key, "collective_name")) {
          ev.collective = true;
          ev.collective_name = string_token(f.value());
        }
        break;
      case 'P':
        if (key_is(key, "Process Group Name")) ev.group = string_token(f.value());
        break;
      case 'I':
        if (key_is(key, "In msg nelems")) {
          ev.nelems = small_uint(f.value().raw_json_token());
        } else if (key_is(key, "Input type")) {
          // The dtype of the operator's first tensor input (entries such as "GenericList" or "Scalar"
          // are arguments that are not tensors).
          od::array types;
          if (f.value().get_array().get(types) != simdjson::SUCCESS) break;
          for (auto item : types) {
            od::value v;
            if (std::move(item).get(v) != simdjson::SUCCESS) break;
            const std::string_view t = string_token(v);
            if (is_tensor_dtype(t)) {
              ev.input_type = t;
              break;
            }
          }
        }
        break;
      case 'S':
        if (key_is(key, "Seq")) ev.seq = small_uint(f.value().raw_json_token());
        break;
      case 'G':
        if (key_is(key, "Group size")) ev.group_size = small_uint(f.value().raw_json_token());
        break;
      default:
        break;
    }
  }
  return simdjson::SUCCESS;
}

/// Reads the fields of one event the analyses use. An event that will be dropped (not a complete event, or
/// of a category no analysis reads) is left as soon as that is known, and the arguments are read only for
/// GPU activities and runtime calls; the iteration skips what is left.
simdjson::error_code read_event(od::value value, EventFields& ev) {
  od::object obj;
  if (auto e = value.get_object().get(obj)) return e;
  std::optional<Cat> cat;
  for (auto field : obj) {
    od::field f;
    if (auto e = std::move(field).get(f)) return e;
    const char* key = f.key().raw();
    std::string_view* slot = nullptr;
    switch (key[0]) {
      case 'p':
        if (key_is(key, "ph"))
          slot = &ev.ph;
        else if (key_is(key, "pid"))
          slot = &ev.pid;
        break;
      case 'c':
        if (key_is(key, "cat")) slot = &ev.cat;
        break;
      case 'n':
        if (key_is(key, "name")) slot = &ev.name;
        break;
      case 't':
        if (key_is(key, "ts"))
          slot = &ev.ts;
        else if (key_is(key, "tid"))
          slot = &ev.tid;
        break;
      case 'd':
        if (key_is(key, "dur")) slot = &ev.dur;
        break;
      case 'a':
        if (key_is(key, "args")) {
          // GEMM / convolution operators: their input dtypes (record_shapes) say what the math was.
          const bool matrix_op = cat && *cat == Cat::cpu_op && is_matrix_operator(unquote(ev.name));
          if (cat && *cat != Cat::kernel && *cat != Cat::memory && *cat != Cat::runtime && !matrix_op)
            continue;
          if (auto e = read_args(f.value(), ev)) return e;
        }
        continue;
      default:
        break;
    }
    if (slot == nullptr) continue;
    od::value v = f.value();
    od::json_type type;
    if (auto e = v.type().get(type)) return e;
    if (type == od::json_type::object || type == od::json_type::array) continue;  // skipped by iteration
    *slot = trim(v.raw_json_token());
    if (slot == &ev.ph && unquote(ev.ph) != "X") return simdjson::SUCCESS;  // counted, not used
    if (slot == &ev.cat) {
      cat = classify_cat(unquote(ev.cat));
      if (*cat == Cat::other) return simdjson::SUCCESS;
    }
  }
  return simdjson::SUCCESS;
}

struct Collector {
  RawTrace& out;
  std::string key_buf;
  bool legacy = false;  // a bare event array of the pre-Kineto autograd profiler: events have no cat

  void add(const EventFields& ev) {
    ++out.event_count;
    if (unquote(ev.ph) != "X") return;
    DecodedEvent d;
    d.cat = (legacy && ev.cat.empty()) ? Cat::cpu_op : classify_cat(unquote(ev.cat));
    if (d.cat == Cat::other) return;
    d.name = unquote(ev.name);
    d.device = unquote(ev.pid);
    if (d.cat != Cat::kernel && d.cat != Cat::memory && d.cat != Cat::gpu_annotation) {
      key_buf.assign(ev.pid);
      key_buf.push_back('/');
      key_buf.append(ev.tid);
      d.thread = key_buf;
    } else {
      d.stream = unquote(ev.tid);
    }
    d.ts = parse_us_to_ns(ev.ts);
    d.dur = parse_us_to_ns(ev.dur);
    static_cast<EventArgs&>(d) = ev;
    add_event(out, d);
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
    std::optional<std::int64_t> major;
    for (auto field : obj) {
      od::field f;
      if (auto e = std::move(field).get(f)) return e;
      od::raw_json_string key = f.key();
      if (key == "computeMajor") {
        std::int64_t v = 0;
        if (f.value().get_int64().get(v) == simdjson::SUCCESS && v >= 0 && v < 1000) major = v;
        continue;
      }
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
    if (major) out.device_compute_major[id] = static_cast<int>(*major);
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
      if (e == simdjson::SUCCESS)
        out.rank = rank;
      else if (e != simdjson::INCORRECT_TYPE && e != simdjson::NUMBER_ERROR)
        return e;
    }
  }
  return simdjson::SUCCESS;
}

/// What a JSON object without a traceEvents array is, from its first keys.
std::string describe_json_object(const std::vector<std::string>& keys, bool events_not_array) {
  auto has = [&](std::string_view k) { return std::find(keys.begin(), keys.end(), k) != keys.end(); };
  if (events_not_array) return "JSON whose traceEvents is not an array";
  if (has("nodes") && (has("schema") || has("pid") || has("finish_ts")))
    return "a Chakra execution trace (ExecutionTraceObserver output), not a profiler trace; pass the Kineto "
           "trace recorded next to it";
  if (has("segments") || has("device_traces")) return "a CUDA memory snapshot (JSON), not a profiler trace";
  if (keys.empty()) return "JSON without trace events (an empty object)";
  std::string list;
  for (const auto& k : keys) {
    if (!list.empty()) list += ", ";
    list += k.size() > 40 ? k.substr(0, 40) + "…" : k;
  }
  return "JSON without trace events (no traceEvents array; top-level keys: " + list + ")";
}

}  // namespace

struct JsonParser::Impl {
  od::parser parser;
};
JsonParser::JsonParser() : impl_(std::make_unique<Impl>()) {}
JsonParser::~JsonParser() = default;

Result<void> parse_trace(const std::string& name, const char* data, std::size_t len, RawTrace& out,
                         const Options& options) {
  JsonParser parser;
  return parse_trace(name, data, len, out, options, parser);
}

Result<void> parse_trace(const std::string& name, const char* data, std::size_t len, RawTrace& out,
                         const Options& options, JsonParser& json_parser) {
  od::parser& parser = json_parser.impl().parser;
  od::document doc;
  auto fail_at = [&](simdjson::error_code e, const char* where) -> Error {
    std::size_t offset = len;
    if (e == simdjson::INCOMPLETE_ARRAY_OR_OBJECT || e == simdjson::UNCLOSED_STRING) where = nullptr;
    if (where != nullptr && where >= data && where <= data + len)
      offset = static_cast<std::size_t>(where - data);
    return make_error(fmt::format("{}: invalid JSON at byte {}{}: {}", name, offset,
                                  offset >= len ? " (end of input)" : "", simdjson::error_message(e)));
  };
  auto location = [&]() -> const char* {
    const char* p = nullptr;
    if (doc.current_location().get(p) != simdjson::SUCCESS) return nullptr;
    return p;
  };
  if (auto e = parser.iterate(data, len, len + simdjson::SIMDJSON_PADDING).get(doc))
    return fail_at(e, nullptr);
  od::json_type root_type;
  if (auto e = doc.type().get(root_type)) return fail_at(e, location());
  auto read_events = [&](od::array events, Collector& collector) -> Result<void> {
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
      if (collector.legacy && ev.ph.empty()) {  // an array of objects that are not trace events
        ++out.event_count;
        continue;
      }
      collector.add(ev);
      if (options.progress && (out.event_count & 0xFFFF) == 0) {
        const char* p = location();
        if (p != nullptr)
          options.progress(static_cast<std::int64_t>(p - data), static_cast<std::int64_t>(len));
      }
    }
    return ok_result();
  };
  if (root_type == od::json_type::array) {
    // The pre-Kineto autograd profiler (PyTorch built without Kineto) writes a bare array of events.
    od::array events;
    if (auto e = doc.get_array().get(events)) return fail_at(e, location());
    Collector collector{out, {}, true};
    const auto before = out.event_count;
    GM_TRY_VOID(read_events(events, collector));
    const bool any_event = !out.activities.empty() || !out.spans.empty() || !out.launches.empty();
    if (any_event) {
      out.has_trace_events = true;
      out.format = "chrome_json_array";
    } else {
      out.not_a_trace = out.event_count == before
                            ? "an empty JSON array (no events)"
                            : "a JSON array without trace events (export_memory_timeline raw data is one)";
    }
    if (const char* rest = location(); rest != nullptr && rest < data + len)
      return fail_at(simdjson::TRAILING_CONTENT, rest);
    return ok_result();
  }
  od::object root;
  if (auto e = doc.get_object().get(root)) {
    if (e == simdjson::INCORRECT_TYPE) {
      out.not_a_trace = "a JSON value that is neither an object nor an array";
      return ok_result();
    }
    return fail_at(e, location());
  }
  Collector collector{out, {}};
  std::vector<std::string> keys;
  bool events_not_array = false;
  for (auto field : root) {
    od::field f;
    if (auto e = std::move(field).get(f)) return fail_at(e, location());
    od::raw_json_string key = f.key();
    if (keys.size() < 8) {
      std::string_view k;
      if (f.unescaped_key().get(k) == simdjson::SUCCESS) keys.emplace_back(k);
    }
    if (key == "traceEvents") {
      od::array events;
      auto e = f.value().get_array().get(events);
      if (e == simdjson::INCORRECT_TYPE) {
        events_not_array = true;
        continue;
      }
      if (e) return fail_at(e, location());
      out.has_trace_events = true;
      out.format = "kineto_json";
      GM_TRY_VOID(read_events(events, collector));
    } else if (key == "deviceProperties") {
      if (auto e = read_device_properties(f.value(), out)) return fail_at(e, location());
    } else if (key == "distributedInfo") {
      if (auto e = read_distributed_info(f.value(), out)) return fail_at(e, location());
    }
  }
  if (const char* rest = location(); rest != nullptr && rest < data + len)
    return fail_at(simdjson::TRAILING_CONTENT, rest);
  if (!out.has_trace_events) out.not_a_trace = describe_json_object(keys, events_not_array);
  return ok_result();
}

namespace {

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
bool parse_event_run(od::parser& parser, char* data, std::size_t begin, std::size_t end,
                     Collector& collector) {
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
bool parse_chunked(const std::string& name, char* data, std::size_t len, RawTrace& out,
                   const Options& options) {
  const std::string_view text(data, len);
  const std::size_t key = text.find("\"traceEvents\"");
  if (key == std::string_view::npos) return false;
  std::size_t p = key + 13;
  while (p < len && is_json_ws(data[p])) ++p;
  if (p >= len || data[p] != ':') return false;
  ++p;
  while (p < len && is_json_ws(data[p])) ++p;
  if (p >= len || data[p] != '[') return false;
  const std::size_t array_open = p;
  od::parser parser;
  if (parser.allocate(kChunkBytes * 2) != simdjson::SUCCESS) return false;
  Collector collector{out, {}};
  // Runs end at the last comma between two events of each ~1 MB stretch, found by the element scanner.
  std::size_t pos = array_open + 1;  // first byte after '[' or after a separating ','
  std::size_t scanned = pos, last_comma = ElementScan::npos, array_close = 0;
  ElementScanState state;
  for (;;) {
    if (scanned >= len) return false;  // the array never closes
    const std::size_t upto = std::min(len, scanned + kChunkBytes);
    const ElementScan r = scan_elements(data + scanned, upto - scanned, state);
    if (r.last_comma != ElementScan::npos) last_comma = scanned + r.last_comma;
    if (r.array_end != ElementScan::npos) {
      array_close = scanned + r.array_end;
      if (!parse_event_run(parser, data, pos, array_close, collector)) return false;
      break;
    }
    scanned = upto;
    if (last_comma != ElementScan::npos && scanned - pos >= kChunkBytes) {
      if (!parse_event_run(parser, data, pos, last_comma, collector)) return false;
      if (options.progress)
        options.progress(static_cast<std::int64_t>(last_comma), static_cast<std::int64_t>(len));
      pos = last_comma + 1;
      last_comma = ElementScan::npos;
    }
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
  out.device_compute_major = std::move(meta.device_compute_major);
  out.has_trace_events = true;
  out.format = "kineto_json";
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
  const std::size_t first_char = text.find_first_not_of(" \t\r\n");
  const bool bare_array = first_char != std::string_view::npos && text[first_char] == '[';
  std::size_t pos = len;
  Options quiet = options;
  quiet.progress = nullptr;
  for (int attempt = 0; attempt < 256 && pos > 0; ++attempt) {
    pos = text.rfind("},", pos - 1);
    if (pos == std::string_view::npos) break;
    data[pos + 1] = ']';
    data[pos + 2] = bare_array ? ' ' : '}';
    RawTrace repaired;
    if (parse_trace(name, data, pos + 3, repaired, quiet) && repaired.has_trace_events) {
      out = std::move(repaired);
      return first;  // still the original error: the caller labels the result partial
    }
  }
  return first;
}

std::string escape_json(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(u));
    } else {
      out.push_back(c);
    }
  }
  return out;
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
    if (end != copy.c_str() + copy.size() || errno != 0 || !(us > -9.2e15 && us < 9.2e15))
      return std::nullopt;
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

}  // namespace gm::trace
