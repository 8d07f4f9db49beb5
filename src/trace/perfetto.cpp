// Perfetto protobuf traces (.pftrace / .pb): a wire-level decoder of the TracePacket stream, mapped onto
// the same tables as the JSON reader (see docs/trace.md for the mapping and the field numbers).
//
// Read: TrackDescriptor (process / thread tracks), InternedData (event names, categories, debug annotation
// names; per packet sequence, cleared by SEQ_INCREMENTAL_STATE_CLEARED), TrackEvent slices (SLICE_BEGIN /
// SLICE_END paired per track) with their categories and the debug annotations the analyses use
// (correlation, Collective name, cbid). Not read: GpuRenderStageEvent packets (counted as skipped GPU
// events), counters, flows.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace/internal.h"

namespace gm::trace::detail {
namespace {

// Field numbers (perfetto/protos/perfetto/trace/...).
constexpr std::uint32_t kTracePacket = 1;                // Trace.packet
constexpr std::uint32_t kPacketTimestamp = 8;            // TracePacket.timestamp (ns)
constexpr std::uint32_t kPacketSequenceId = 10;          // TracePacket.trusted_packet_sequence_id
constexpr std::uint32_t kPacketTrackEvent = 11;          // TracePacket.track_event
constexpr std::uint32_t kPacketInternedData = 12;        // TracePacket.interned_data
constexpr std::uint32_t kPacketSequenceFlags = 13;       // TracePacket.sequence_flags
constexpr std::uint32_t kPacketStateCleared = 41;        // TracePacket.incremental_state_cleared
constexpr std::uint32_t kPacketGpuRenderStage = 53;      // TracePacket.gpu_render_stage_event
constexpr std::uint32_t kPacketTrackDescriptor = 60;     // TracePacket.track_descriptor
constexpr std::uint32_t kEventCategoryIids = 3;          // TrackEvent.category_iids
constexpr std::uint32_t kEventDebugAnnotations = 4;      // TrackEvent.debug_annotations
constexpr std::uint32_t kEventType = 9;                  // TrackEvent.type
constexpr std::uint32_t kEventNameIid = 10;              // TrackEvent.name_iid
constexpr std::uint32_t kEventTrackUuid = 11;            // TrackEvent.track_uuid
constexpr std::uint32_t kEventTimestampAbsoluteUs = 16;  // TrackEvent.timestamp_absolute_us
constexpr std::uint32_t kEventCategories = 22;           // TrackEvent.categories
constexpr std::uint32_t kEventName = 23;                 // TrackEvent.name
constexpr std::uint32_t kInternedCategories = 1;         // InternedData.event_categories
constexpr std::uint32_t kInternedNames = 2;              // InternedData.event_names
constexpr std::uint32_t kInternedAnnotationNames = 3;    // InternedData.debug_annotation_names
constexpr std::uint32_t kAnnotationNameIid = 1;          // DebugAnnotation.name_iid
constexpr std::uint32_t kAnnotationName = 10;            // DebugAnnotation.name
constexpr std::uint32_t kAnnotationUint = 3;             // DebugAnnotation.uint_value
constexpr std::uint32_t kAnnotationInt = 4;              // DebugAnnotation.int_value
constexpr std::uint32_t kAnnotationString = 6;           // DebugAnnotation.string_value
constexpr std::uint32_t kTrackUuid = 1;                  // TrackDescriptor.uuid
constexpr std::uint32_t kTrackName = 2;                  // TrackDescriptor.name
constexpr std::uint32_t kTrackProcess = 3;               // TrackDescriptor.process
constexpr std::uint32_t kTrackThread = 4;                // TrackDescriptor.thread
constexpr std::uint32_t kTrackParent = 5;                // TrackDescriptor.parent_uuid
constexpr std::uint32_t kProcessPid = 1;                 // ProcessDescriptor.pid
constexpr std::uint32_t kProcessName = 6;                // ProcessDescriptor.process_name
constexpr std::uint32_t kThreadPid = 1;                  // ThreadDescriptor.pid
constexpr std::uint32_t kThreadTid = 2;                  // ThreadDescriptor.tid
constexpr std::uint32_t kThreadName = 5;                 // ThreadDescriptor.thread_name
constexpr std::uint64_t kTypeSliceBegin = 1, kTypeSliceEnd = 2;
constexpr std::uint64_t kSeqIncrementalStateCleared = 1;

/// One field of a protobuf message.
struct Field {
  std::uint32_t number = 0;
  std::uint8_t wire = 0;
  std::uint64_t value = 0;  // varint / fixed
  std::string_view bytes;   // length-delimited
};

/// Iterates over the fields of one message; `bad` is set on malformed input.
class Fields {
 public:
  explicit Fields(std::string_view data) : data_(data) {}
  bool next(Field& f) {
    if (pos_ >= data_.size() || bad_) return false;
    std::uint64_t tag = 0;
    if (!varint(tag)) return fail();
    f.number = static_cast<std::uint32_t>(tag >> 3);
    f.wire = static_cast<std::uint8_t>(tag & 7);
    if (f.number == 0) return fail();
    switch (f.wire) {
      case 0:
        return varint(f.value) || fail();
      case 1:
        return fixed(8, f.value) || fail();
      case 5:
        return fixed(4, f.value) || fail();
      case 2: {
        std::uint64_t len = 0;
        if (!varint(len) || len > data_.size() - pos_) return fail();
        f.bytes = data_.substr(pos_, static_cast<std::size_t>(len));
        pos_ += static_cast<std::size_t>(len);
        return true;
      }
      default:
        return fail();
    }
  }
  bool bad() const { return bad_; }
  std::size_t pos() const { return pos_; }

 private:
  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool fixed(std::size_t n, std::uint64_t& v) {
    if (data_.size() - pos_ < n) return false;
    v = 0;
    for (std::size_t i = 0; i < n; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += n;
    return true;
  }
  bool fail() {
    bad_ = true;
    return false;
  }
  std::string_view data_;
  std::size_t pos_ = 0;
  bool bad_ = false;
};

struct Track {
  std::optional<std::int64_t> pid, tid;
  std::uint64_t parent = 0;
  std::string name;  // thread name, else process name, else track name
};

/// Interned strings of one packet sequence.
struct SequenceState {
  std::unordered_map<std::uint64_t, std::string> names, categories, annotation_names;
};

/// A slice begun and not yet ended.
struct OpenSlice {
  std::int64_t ts_ns;
  std::uint32_t name;  // local interner (escaped)
  std::uint32_t cat;   // local interner (raw category), UINT32_MAX when none
  std::int64_t correlation;
  bool collective, cbid;
  // NCCL metadata (local interner, escaped; UINT32_MAX when absent) and numbers (-1 when absent).
  std::uint32_t group = UINT32_MAX, collective_name = UINT32_MAX;
  std::int64_t nelems = -1, seq = -1, group_size = -1;
};

struct Slice {
  OpenSlice open;
  std::int64_t end_ns;
  std::uint64_t track;
};

class Decoder {
 public:
  Decoder(const std::string& name, RawTrace& out) : name_(name), out_(out) {}

  /// Decodes the Trace message; an Error names the byte offset of the first damaged packet.
  Result<void> run(std::string_view data) {
    Fields trace(data);
    Field f;
    std::size_t packet_start = 0;
    while (trace.next(f)) {
      if (f.number == kTracePacket && f.wire == 2) {
        if (!packet(f.bytes)) return damaged(packet_start, "a TracePacket does not decode");
        any_packet_ = true;
      }
      packet_start = trace.pos();
    }
    if (trace.bad())
      return damaged(packet_start, "a field runs past the end of the file or has an invalid tag");
    return ok_result();
  }

  /// Adds the completed slices to the tables.
  void finish() {
    out_.has_trace_events = any_packet_;
    out_.format = "perfetto_protobuf";
    std::string device, thread, stream;
    for (const auto& s : slices_) {
      const Track* t = track(s.track);
      // (plain values: GCC's -Wmaybe-uninitialized misfires on std::optional here)
      bool has_pid = false, has_tid = false;
      std::int64_t pid = 0, tid = 0;
      if (t != nullptr && t->tid) {
        has_tid = true;
        tid = *t->tid;
      }
      // A damaged file can make parent_uuid chains cycle: walk at most one step per track.
      std::size_t steps = 0;
      for (const Track* p = t; p != nullptr && !has_pid && steps <= tracks_.size();
           p = track(p->parent), ++steps) {
        if (p->pid) {
          has_pid = true;
          pid = *p->pid;
        }
      }
      device = has_pid ? std::to_string(pid) : fmt::format("track {}", s.track);
      thread = has_tid ? device + "/" + std::to_string(tid) : fmt::format("track {}", s.track);
      DecodedEvent ev;
      ev.name = names_.str(s.open.name);
      ev.cat = s.open.cat != UINT32_MAX ? classify_cat(names_.str(s.open.cat)) : infer(s, t);
      ev.device = device;
      ev.thread = thread;
      stream = has_tid ? std::to_string(tid) : t != nullptr ? t->name : std::string();
      ev.stream = stream;
      ev.ts = s.open.ts_ns;
      ev.dur = s.end_ns - s.open.ts_ns;
      ev.correlation = s.open.correlation;
      ev.collective = s.open.collective;
      if (s.open.group != UINT32_MAX) ev.group = names_.str(s.open.group);
      if (s.open.collective_name != UINT32_MAX) ev.collective_name = names_.str(s.open.collective_name);
      if (s.open.nelems >= 0) ev.nelems = s.open.nelems;
      if (s.open.seq >= 0) ev.seq = s.open.seq;
      if (s.open.group_size >= 0) ev.group_size = s.open.group_size;
      add_event(out_, ev);
    }
    out_.skipped_events += render_stage_events_;
    out_.event_count = event_count_;
  }

 private:
  Error damaged(std::size_t offset, const char* what) {
    return make_error(fmt::format("{}: invalid Perfetto protobuf at byte {}: {}", name_, offset, what));
  }

  const Track* track(std::uint64_t uuid) const {
    if (uuid == 0) return nullptr;
    auto it = tracks_.find(uuid);
    return it == tracks_.end() ? nullptr : &it->second;
  }

  /// Category of a slice written without one: PyTorch's encoder names its tracks "stream N" (GPU
  /// streams) and puts a "cbid" annotation on runtime / driver calls.
  Cat infer(const Slice& s, const Track* t) const {
    if (s.open.cbid) return Cat::runtime;
    if (t != nullptr && t->name.starts_with("stream ")) {
      const std::string& n = names_.str(s.open.name);
      if (n.starts_with("Memcpy") || n.starts_with("Memset")) return Cat::memory;
      return Cat::kernel;
    }
    return Cat::cpu_op;
  }

  bool packet(std::string_view data) {
    Fields fields(data);
    Field f;
    std::optional<std::uint64_t> ts;
    std::uint32_t seq = 0;
    bool cleared = false;
    std::string_view interned, event, descriptor;
    while (fields.next(f)) {
      switch (f.number) {
        case kPacketTimestamp:
          ts = f.value;
          break;
        case kPacketSequenceId:
          seq = static_cast<std::uint32_t>(f.value);
          break;
        case kPacketSequenceFlags:
          cleared = cleared || (f.value & kSeqIncrementalStateCleared) != 0;
          break;
        case kPacketStateCleared:
          cleared = cleared || f.value != 0;
          break;
        case kPacketInternedData:
          interned = f.bytes;
          break;
        case kPacketTrackEvent:
          event = f.bytes;
          break;
        case kPacketTrackDescriptor:
          descriptor = f.bytes;
          break;
        case kPacketGpuRenderStage:
          ++render_stage_events_;
          break;
        default:
          break;
      }
    }
    if (fields.bad()) return false;
    auto& state = sequences_[seq];
    if (cleared) state = SequenceState{};
    if (!interned.empty() && !interned_data(interned, state)) return false;
    if (!descriptor.empty() && !track_descriptor(descriptor)) return false;
    if (!event.empty() && !track_event(event, ts, state)) return false;
    return true;
  }

  static bool interned_entry(std::string_view data, std::unordered_map<std::uint64_t, std::string>& table) {
    Fields fields(data);
    Field f;
    std::uint64_t iid = 0;
    std::string_view name;
    while (fields.next(f)) {
      if (f.number == 1 && f.wire == 0)
        iid = f.value;
      else if (f.number == 2 && f.wire == 2)
        name = f.bytes;
    }
    if (fields.bad()) return false;
    table[iid] = std::string(name);
    return true;
  }

  static bool interned_data(std::string_view data, SequenceState& state) {
    Fields fields(data);
    Field f;
    while (fields.next(f)) {
      if (f.wire != 2) continue;
      if (f.number == kInternedNames && !interned_entry(f.bytes, state.names)) return false;
      if (f.number == kInternedCategories && !interned_entry(f.bytes, state.categories)) return false;
      if (f.number == kInternedAnnotationNames && !interned_entry(f.bytes, state.annotation_names))
        return false;
    }
    return !fields.bad();
  }

  bool track_descriptor(std::string_view data) {
    Fields fields(data);
    Field f;
    std::uint64_t uuid = 0;
    Track t;
    std::string track_name, process_name, thread_name;
    auto descriptor = [&](std::string_view d, bool thread) {
      Fields sub(d);
      Field g;
      while (sub.next(g)) {
        if (g.number == (thread ? kThreadPid : kProcessPid) && g.wire == 0)
          t.pid = static_cast<std::int32_t>(static_cast<std::uint32_t>(g.value));
        else if (thread && g.number == kThreadTid && g.wire == 0)
          t.tid = static_cast<std::int32_t>(static_cast<std::uint32_t>(g.value));
        else if (g.number == (thread ? kThreadName : kProcessName) && g.wire == 2)
          (thread ? thread_name : process_name) = std::string(g.bytes);
      }
      return !sub.bad();
    };
    while (fields.next(f)) {
      if (f.number == kTrackUuid && f.wire == 0)
        uuid = f.value;
      else if (f.number == kTrackParent && f.wire == 0)
        t.parent = f.value;
      else if (f.number == kTrackName && f.wire == 2)
        track_name = std::string(f.bytes);
      else if (f.number == kTrackProcess && f.wire == 2 && !descriptor(f.bytes, false))
        return false;
      else if (f.number == kTrackThread && f.wire == 2 && !descriptor(f.bytes, true))
        return false;
    }
    if (fields.bad()) return false;
    t.name = !thread_name.empty() ? thread_name : !process_name.empty() ? process_name : track_name;
    tracks_[uuid] = std::move(t);
    return true;
  }

  bool annotation(std::string_view data, const SequenceState& state, OpenSlice& s) {
    Fields fields(data);
    Field f;
    std::string_view name;
    std::optional<std::uint64_t> number;
    std::optional<std::string_view> text;
    while (fields.next(f)) {
      if (f.number == kAnnotationString && f.wire == 2) {
        text = f.bytes;
      } else if (f.number == kAnnotationName && f.wire == 2) {
        name = f.bytes;
      } else if (f.number == kAnnotationNameIid && f.wire == 0) {
        auto it = state.annotation_names.find(f.value);
        if (it != state.annotation_names.end()) name = it->second;
      } else if ((f.number == kAnnotationUint || f.number == kAnnotationInt) && f.wire == 0) {
        number = f.value;
      }
    }
    if (fields.bad()) return false;
    if (name == "correlation" && number && static_cast<std::int64_t>(*number) >= 0)
      s.correlation = static_cast<std::int64_t>(*number);
    else if (name == "Collective name" || name == "collective_name") {
      s.collective = true;
      if (text) s.collective_name = names_.id(escape_json(*text));
    } else if (name == "Process Group Name" && text)
      s.group = names_.id(escape_json(*text));
    else if (name == "In msg nelems" && number && *number < (1ULL << 62))
      s.nelems = static_cast<std::int64_t>(*number);
    else if (name == "Seq" && number && *number < (1ULL << 62))
      s.seq = static_cast<std::int64_t>(*number);
    else if (name == "Group size" && number && *number < (1ULL << 62))
      s.group_size = static_cast<std::int64_t>(*number);
    else if (name == "cbid")
      s.cbid = true;
    return true;
  }

  bool track_event(std::string_view data, std::optional<std::uint64_t> ts, const SequenceState& state) {
    Fields fields(data);
    Field f;
    std::uint64_t type = 0, uuid = 0;
    std::string_view name;
    std::optional<std::string_view> category;
    OpenSlice s{0, 0, UINT32_MAX, -1, false, false};
    std::vector<std::string_view> annotations;
    while (fields.next(f)) {
      switch (f.number) {
        case kEventType:
          type = f.value;
          break;
        case kEventTrackUuid:
          uuid = f.value;
          break;
        case kEventName:
          if (f.wire == 2) name = f.bytes;
          break;
        case kEventNameIid: {
          auto it = state.names.find(f.value);
          if (it != state.names.end()) name = it->second;
          break;
        }
        case kEventCategories:
          if (f.wire == 2 && !category) category = f.bytes;
          break;
        case kEventCategoryIids:
          if (f.wire == 0 && !category) {
            auto it = state.categories.find(f.value);
            if (it != state.categories.end()) category = it->second;
          }
          break;
        case kEventDebugAnnotations:
          if (f.wire == 2) annotations.push_back(f.bytes);
          break;
        case kEventTimestampAbsoluteUs:
          if (!ts && f.wire == 0) ts = static_cast<std::uint64_t>(static_cast<std::int64_t>(f.value) * 1000);
          break;
        default:
          break;
      }
    }
    if (fields.bad()) return false;
    if (type == kTypeSliceBegin) {
      if (!ts || *ts > static_cast<std::uint64_t>(INT64_MAX)) return true;
      for (auto a : annotations)
        if (!annotation(a, state, s)) return false;
      s.ts_ns = static_cast<std::int64_t>(*ts);
      s.name = names_.id(escape_json(name));
      if (category) s.cat = names_.id(*category);
      open_[uuid].push_back(s);
    } else if (type == kTypeSliceEnd) {
      auto it = open_.find(uuid);
      if (it == open_.end() || it->second.empty() || !ts || *ts > static_cast<std::uint64_t>(INT64_MAX))
        return true;
      const OpenSlice begun = it->second.back();
      it->second.pop_back();
      ++event_count_;
      slices_.push_back(Slice{begun, static_cast<std::int64_t>(*ts), uuid});
    } else {
      ++event_count_;  // instants, counters: not used by the analyses
    }
    return true;
  }

  const std::string& name_;
  RawTrace& out_;
  bool any_packet_ = false;
  std::int64_t event_count_ = 0;
  std::int64_t render_stage_events_ = 0;
  Interner names_;  // escaped slice names and raw categories
  std::unordered_map<std::uint64_t, Track> tracks_;
  std::unordered_map<std::uint32_t, SequenceState> sequences_;
  std::unordered_map<std::uint64_t, std::vector<OpenSlice>> open_;
  std::vector<Slice> slices_;
};

}  // namespace

Result<void> parse_perfetto(const std::string& name, const char* data, std::size_t len, RawTrace& out,
                            const Options& options) {
  Decoder decoder(name, out);
  auto r = decoder.run(std::string_view(data, len));
  decoder.finish();  // what was read before any damage
  if (options.progress) options.progress(static_cast<std::int64_t>(len), static_cast<std::int64_t>(len));
  return r;
}

}  // namespace gm::trace::detail
