#include "support/pftrace_writer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "trace/trace.h"

namespace gm::test {
namespace {

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, std::uint32_t field, std::uint32_t wire) {
  put_varint(out, (field << 3) | wire);
}
void put_uint(std::string& out, std::uint32_t field, std::uint64_t v) {
  put_tag(out, field, 0);
  put_varint(out, v);
}
void put_bytes(std::string& out, std::uint32_t field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_double(std::string& out, std::uint32_t field, double v) {
  put_tag(out, field, 1);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, 8);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

struct Event {
  std::int64_t start, end;
  std::string name, cat;
  nlohmann::json args;
};

std::string debug_annotation(const std::string& key, const nlohmann::json& v) {
  std::string a;
  put_bytes(a, 10, key);  // name
  if (v.is_boolean())
    put_uint(a, 2, v.get<bool>() ? 1 : 0);
  else if (v.is_number_unsigned())
    put_uint(a, 3, v.get<std::uint64_t>());
  else if (v.is_number_integer())
    put_uint(a, 4, static_cast<std::uint64_t>(v.get<std::int64_t>()));
  else if (v.is_number_float())
    put_double(a, 5, v.get<double>());
  else if (v.is_string())
    put_bytes(a, 6, v.get<std::string>());
  else
    return {};
  return a;
}

}  // namespace

std::string json_with_quoted_times(const std::string& text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  std::size_t i = 0;
  std::size_t next[2] = {0, 0};  // next occurrence of each key at or after i (found once per occurrence)
  bool searched[2] = {false, false};
  while (i < text.size()) {
    std::size_t best = std::string::npos, key_len = 0;
    const char* keys[2] = {"\"ts\":", "\"dur\":"};
    for (int j = 0; j < 2; ++j) {
      if (!searched[j] || (next[j] != std::string::npos && next[j] < i)) {
        next[j] = text.find(keys[j], i);
        searched[j] = true;
      }
      if (next[j] < best) {
        best = next[j];
        key_len = std::strlen(keys[j]);
      }
    }
    if (best == std::string::npos) {
      out.append(text, i, std::string::npos);
      break;
    }
    std::size_t j = best + key_len;
    out.append(text, i, j - i);
    while (j < text.size() && text[j] == ' ') out.push_back(text[j++]);
    const std::size_t start = j;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.' ||
                               text[j] == '-' || text[j] == 'e' || text[j] == 'E' || text[j] == '+'))
      ++j;
    if (j > start) out += "\"" + text.substr(start, j - start) + "\"";
    i = j;
  }
  return out;
}

std::string kineto_json_to_pftrace(const std::string& json) {
  const auto doc = nlohmann::json::parse(json_with_quoted_times(json));
  const auto& events = doc.is_array() ? doc : doc.at("traceEvents");
  // Kineto pids / tids are numbers or strings; Perfetto's are int32.
  std::map<std::string, std::int64_t> string_ids;
  auto id_of = [&](const nlohmann::json& v) -> std::int64_t {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    const std::string key = v.dump();
    auto [it, inserted] = string_ids.emplace(key, 1'000'000 + static_cast<std::int64_t>(string_ids.size()));
    return it->second;
  };
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<Event>> by_thread;
  for (const auto& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("ts") || !e.contains("dur")) continue;
    if (!e["ts"].is_string() || !e["dur"].is_string()) continue;
    auto ts = trace::parse_us_to_ns(e["ts"].get<std::string>());
    auto dur = trace::parse_us_to_ns(e["dur"].get<std::string>());
    if (!ts || !dur || *ts < 0 || *dur < 0) continue;
    Event ev{*ts, *ts + *dur, e.value("name", ""), e.value("cat", ""),
             e.value("args", nlohmann::json::object())};
    by_thread[{id_of(e.value("pid", nlohmann::json(0))), id_of(e.value("tid", nlohmann::json(0)))}].push_back(
        std::move(ev));
  }

  std::string trace;
  auto packet = [&](const std::string& body) { put_bytes(trace, 1, body); };
  // Interned names and categories (sequence 1).
  std::map<std::string, std::uint64_t> name_iid, cat_iid;
  for (const auto& [key, evs] : by_thread)
    for (const auto& e : evs) {
      name_iid.emplace(e.name, name_iid.size() + 1);
      if (!e.cat.empty()) cat_iid.emplace(e.cat, cat_iid.size() + 1);
    }
  {
    std::string interned;
    for (const auto& [name, iid] : name_iid) {
      std::string en;
      put_uint(en, 1, iid);
      put_bytes(en, 2, name);
      put_bytes(interned, 2, en);  // event_names
    }
    for (const auto& [cat, iid] : cat_iid) {
      std::string ec;
      put_uint(ec, 1, iid);
      put_bytes(ec, 2, cat);
      put_bytes(interned, 1, ec);  // event_categories
    }
    std::string p;
    put_uint(p, 10, 1);  // trusted_packet_sequence_id
    put_uint(p, 13, 1);  // SEQ_INCREMENTAL_STATE_CLEARED
    put_bytes(p, 12, interned);
    packet(p);
  }
  std::uint64_t next_uuid = 1;
  std::map<std::int64_t, std::uint64_t> process_uuid;
  for (auto& [key, evs] : by_thread) {
    const auto [pid, tid] = key;
    if (!process_uuid.contains(pid)) {
      process_uuid[pid] = next_uuid++;
      std::string proc, td, p;
      put_uint(proc, 1, static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)));
      put_bytes(proc, 6, "process " + std::to_string(pid));
      put_uint(td, 1, process_uuid[pid]);
      put_bytes(td, 3, proc);
      put_bytes(p, 60, td);
      packet(p);
    }
    // Lanes: slices that nest share a lane; one that overlaps an open slice without nesting in it
    // goes to the next lane where it nests.
    std::sort(evs.begin(), evs.end(), [](const Event& a, const Event& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<std::vector<const Event*>> stacks;
    std::vector<std::vector<std::pair<std::int64_t, std::string>>> lane_packets;  // (ts, packet) per lane
    std::vector<std::uint64_t> lane_uuid;
    auto end_slice = [&](std::size_t lane, const Event* e) {
      std::string te, p;
      put_uint(te, 9, 2);  // TYPE_SLICE_END
      put_uint(te, 11, lane_uuid[lane]);
      put_uint(p, 8, static_cast<std::uint64_t>(e->end));
      put_uint(p, 10, 1);
      put_bytes(p, 11, te);
      lane_packets[lane].emplace_back(e->end, p);
    };
    for (const auto& e : evs) {
      std::size_t lane = 0;
      for (;; ++lane) {
        if (lane == stacks.size()) {
          stacks.emplace_back();
          lane_packets.emplace_back();
          lane_uuid.push_back(next_uuid++);
          std::string thr, td, p;
          put_uint(thr, 1, static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)));
          put_uint(thr, 2, static_cast<std::uint64_t>(static_cast<std::uint32_t>(tid)));
          put_bytes(thr, 5, "thread " + std::to_string(tid));
          put_uint(td, 1, lane_uuid[lane]);
          put_uint(td, 5, process_uuid[pid]);
          put_bytes(td, 4, thr);
          put_bytes(p, 60, td);
          packet(p);
        }
        auto& st = stacks[lane];
        while (!st.empty() && st.back()->end <= e.start &&
               !(st.back()->end == e.start && st.back()->start == e.start && e.end == e.start)) {
          end_slice(lane, st.back());
          st.pop_back();
        }
        if (st.empty() || st.back()->end >= e.end) break;
      }
      std::string te, p;
      put_uint(te, 9, 1);  // TYPE_SLICE_BEGIN
      put_uint(te, 11, lane_uuid[lane]);
      put_uint(te, 10, name_iid.at(e.name));
      if (!e.cat.empty()) put_uint(te, 3, cat_iid.at(e.cat));
      if (e.args.is_object())
        for (const auto& [k, v] : e.args.items()) {
          const auto a = debug_annotation(k, v);
          if (!a.empty()) put_bytes(te, 4, a);
        }
      put_uint(p, 8, static_cast<std::uint64_t>(e.start));
      put_uint(p, 10, 1);
      put_uint(p, 13, 2);  // SEQ_NEEDS_INCREMENTAL_STATE
      put_bytes(p, 11, te);
      lane_packets[lane].emplace_back(e.start, p);
      stacks[lane].push_back(&e);
    }
    for (std::size_t lane = 0; lane < stacks.size(); ++lane) {
      while (!stacks[lane].empty()) {
        end_slice(lane, stacks[lane].back());
        stacks[lane].pop_back();
      }
      for (const auto& [ts, p] : lane_packets[lane]) packet(p);
    }
  }
  return trace;
}

}  // namespace gm::test
