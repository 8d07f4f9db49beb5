#include "scenario.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "util/json_in.h"

namespace fake_nvml {
namespace {

using nlohmann::json;

struct Bad : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr double kMaxNumber = 1e9;

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw Bad(where + ": " + what); }

std::optional<double> number(const json& obj, const char* key, const std::string& where, bool non_negative = true) {
  const json* it = gm::util::json_member(obj, key);
  if (it == nullptr || it->is_null()) return std::nullopt;
  if (!it->is_number()) bad(where, std::string("\"") + key + "\" must be a number");
  const auto finite = gm::util::json_number(it);
  const double v = finite.value_or(0);
  if (!finite || (non_negative && v < 0))
    bad(where, std::string("\"") + key + "\" must be a finite number >= 0");
  // Every quantity of the format (seconds, MiB, W, %, MHz, ms, ids) fits; the library converts them to integers.
  if (std::fabs(v) > kMaxNumber) bad(where, std::string("\"") + key + "\" must be at most 1e9");
  return v;
}

std::string text(const json& obj, const char* key, const std::string& where, const std::string& fallback) {
  const json* it = gm::util::json_member(obj, key);
  if (it == nullptr || it->is_null()) return fallback;
  auto s = gm::util::json_string(it);
  if (!s) bad(where, std::string("\"") + key + "\" must be a string");
  return *s;
}

void check_keys(const json& obj, const std::string& where, std::initializer_list<const char*> allowed) {
  if (!obj.is_object()) bad(where, "must be an object");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : allowed) known = known || it.key() == k;
    if (!known) bad(where, "unknown key \"" + it.key() + "\"");
  }
}

unsigned arch_from_name(const std::string& name) {
  static const std::pair<const char*, unsigned> table[] = {
      {"B200", 10}, {"B100", 10}, {"GB200", 10}, {"H100", 9}, {"H200", 9}, {"H800", 9}, {"GH200", 9},
      {"L40", 8},   {"L4", 8},    {"RTX 40", 8}, {"RTX 6000 Ada", 8}, {"A100", 7}, {"A10", 7}, {"A30", 7},
      {"A40", 7},   {"A800", 7},  {"RTX 30", 7}, {"T4", 6}, {"V100", 5}, {"P100", 4}, {"K80", 2}};
  for (const auto& [key, arch] : table) {
    if (name.find(key) != std::string::npos) return arch;
  }
  return 0;
}

ProcessSpec parse_process(const json& j, const std::string& where) {
  check_keys(j, where, {"pid", "comm", "mem_mib", "sm_util", "foreign_pid"});
  ProcessSpec p;
  if (auto pid = number(j, "pid", where)) {
    if (*pid != std::floor(*pid) || *pid > 4294967295.0) bad(where, "\"pid\" must be a whole number");
    p.pid = static_cast<std::uint32_t>(*pid);
  }
  if (j.contains("comm")) p.comm = text(j, "comm", where, "");
  if (p.pid.has_value() == p.comm.has_value()) bad(where, "give exactly one of \"pid\" or \"comm\"");
  p.mem_mib = number(j, "mem_mib", where);
  p.sm_util = number(j, "sm_util", where);
  if (const json* f = gm::util::json_member(j, "foreign_pid"); f && !f->is_null()) {
    const auto on = gm::util::json_bool(f);
    if (!on) bad(where, "\"foreign_pid\" must be true or false");
    p.foreign_pid = *on;
  }
  return p;
}

std::optional<GpmSpec> parse_gpm(const json& obj, const std::string& where) {
  auto it = obj.find("gpm");
  if (it == obj.end() || it->is_null()) return std::nullopt;
  const std::string w = where + ".gpm";
  check_keys(
      *it, w,
      {"sm_util", "sm_occupancy", "tensor_util", "fp32_util", "fp16_util", "fp64_util", "dram_bw_util"});
  GpmSpec g;
  std::optional<double> GpmSpec::*fields[] = {
      &GpmSpec::sm_util,   &GpmSpec::sm_occupancy, &GpmSpec::tensor_util, &GpmSpec::fp32_util,
      &GpmSpec::fp16_util, &GpmSpec::fp64_util,    &GpmSpec::dram_bw_util};
  const char* keys[] = {"sm_util",   "sm_occupancy", "tensor_util", "fp32_util",
                        "fp16_util", "fp64_util",    "dram_bw_util"};
  for (std::size_t i = 0; i < std::size(keys); ++i) {
    g.*fields[i] = number(*it, keys[i], w);
    if (g.*fields[i] && *(g.*fields[i]) > 100)
      bad(w, std::string("\"") + keys[i] + "\" must be a percentage from 0 to 100");
  }
  return g;
}

Segment parse_segment(const json& j, const std::string& where) {
  check_keys(j, where,
             {"t", "util", "mem_util", "mem_used_mib", "power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz",
              "processes", "gpm"});
  Segment s;
  auto t = number(j, "t", where);
  if (!t) bad(where, "missing \"t\" (seconds since nvmlInit)");
  s.t_s = *t;
  s.util = number(j, "util", where);
  s.mem_util = number(j, "mem_util", where);
  s.mem_used_mib = number(j, "mem_used_mib", where);
  s.power_w = number(j, "power_w", where);
  s.temp_c = number(j, "temp_c", where, false);
  s.sm_clock_mhz = number(j, "sm_clock_mhz", where);
  s.mem_clock_mhz = number(j, "mem_clock_mhz", where);
  s.gpm = parse_gpm(j, where);
  if (auto it = j.find("processes"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) bad(where, "\"processes\" must be an array");
    for (std::size_t i = 0; i < it->size(); ++i) {
      s.processes.push_back(parse_process((*it)[i], where + ".processes[" + std::to_string(i) + "]"));
    }
  }
  return s;
}

Fault parse_fault(const json& j, const std::string& where) {
  check_keys(j, where, {"t", "until", "function", "return", "hang_ms"});
  Fault f;
  f.t_s = number(j, "t", where).value_or(0);
  if (auto u = number(j, "until", where)) f.until_s = *u;
  if (f.until_s < f.t_s) bad(where, "\"until\" is before \"t\"");
  f.function = text(j, "function", where, "*");
  if (f.function == "nvmlDeviceGetHandleByIndex_v2") f.function = "nvmlDeviceGetHandleByIndex";  // one entry point
  if (const json* it = gm::util::json_member(j, "return"); it && !it->is_null()) {
    if (it->is_number_integer()) {
      const auto code = gm::util::json_int(it);
      if (!code || *code < 0 || *code > 2147483647)
        bad(where, "\"return\" must be an NVML return code from 0 to 2147483647");
      f.ret = static_cast<int>(*code);
    } else if (auto name = gm::util::json_string(it)) {
      int code = return_code_for(*name);
      if (code < 0) bad(where, "unknown NVML return \"" + *name + "\"");
      f.ret = code;
    } else {
      bad(where, "\"return\" must be an NVML error name or a number");
    }
  }
  if (auto h = number(j, "hang_ms", where)) f.hang_ms = static_cast<std::int64_t>(*h);
  if (!f.ret && f.hang_ms == 0) bad(where, "a fault needs \"return\" or \"hang_ms\"");
  return f;
}

DeviceSpec parse_device(const json& j, const std::string& where, std::size_t index) {
  check_keys(j, where, {"name", "uuid", "pci_bus_id", "memory_total_mib", "power_limit_w", "architecture",
                        "energy_counter", "mig", "mig_slices", "mig_instances", "minor", "timeline", "faults"});
  DeviceSpec d;
  d.name = text(j, "name", where, "NVIDIA Fake GPU");
  d.uuid = text(j, "uuid", where, "GPU-00000000-0000-0000-0000-" + std::to_string(100000000000 + index));
  char bus[32];
  std::snprintf(bus, sizeof bus, "00000000:%02zX:00.0", index + 1);
  d.pci_bus_id = text(j, "pci_bus_id", where, bus);
  d.memory_total_mib = number(j, "memory_total_mib", where);
  d.power_limit_w = number(j, "power_limit_w", where);
  if (const json* a = gm::util::json_member(j, "architecture"); a && !a->is_null()) {
    static const std::map<std::string, unsigned> names = {{"Kepler", 2}, {"Maxwell", 3}, {"Pascal", 4},
        {"Volta", 5}, {"Turing", 6}, {"Ampere", 7}, {"Ada", 8}, {"Hopper", 9}, {"Blackwell", 10}};
    const auto name = gm::util::json_string(a);
    const auto known = name ? names.find(*name) : names.end();
    if (known == names.end()) {
      bad(where, "\"architecture\" must be one of Kepler, Maxwell, Pascal, Volta, Turing, Ampere, Ada, Hopper, Blackwell");
    }
    d.architecture = known->second;
  } else if (unsigned arch = arch_from_name(d.name); arch != 0) {
    d.architecture = arch;
  }
  d.minor = static_cast<unsigned>(index);
  if (const json* mn = gm::util::json_member(j, "minor")) {
    if (mn->is_null()) {
      d.minor.reset();
    } else {
      const auto v = number(j, "minor", where);
      if (*v != std::floor(*v) || *v > 1048575) bad(where, "\"minor\" must be a whole number up to 1048575, or null");
      d.minor = static_cast<unsigned>(*v);
    }
  }
  if (const json* e = gm::util::json_member(j, "energy_counter"); e && !e->is_null()) {
    const auto on = gm::util::json_bool(e);
    if (!on) bad(where, "\"energy_counter\" must be true or false");
    d.energy_counter = *on;
  }
  if (const json* m = gm::util::json_member(j, "mig"); m && !m->is_null()) {
    const auto on = gm::util::json_bool(m);
    if (!on) bad(where, "\"mig\" must be true or false");
    d.mig = *on;
  }
  if (auto ms = number(j, "mig_slices", where)) {
    if (*ms != 4 && *ms != 7 && *ms != 8) bad(where, "\"mig_slices\" must be 4, 7 or 8");
    d.mig_board_slices = static_cast<unsigned>(*ms);
  }
  if (auto mi = j.find("mig_instances"); mi != j.end() && !mi->is_null()) {
    if (!mi->is_array()) bad(where, "\"mig_instances\" must be an array");
    for (std::size_t i = 0; i < mi->size(); ++i) {
      std::string w = where + ".mig_instances[" + std::to_string(i) + "]";
      const json& m = (*mi)[i];
      check_keys(m, w, {"uuid", "gpu_instance_id", "memory_total_mib", "mem_used_mib", "slices", "gpm"});
      MigSpec spec;
      spec.uuid = text(m, "uuid", w, "MIG-" + d.uuid.substr(d.uuid.size() > 4 ? 4 : 0) + "-" + std::to_string(i));
      spec.gpu_instance_id = static_cast<unsigned>(number(m, "gpu_instance_id", w).value_or(static_cast<double>(i)));
      spec.memory_total_mib = number(m, "memory_total_mib", w);
      spec.mem_used_mib = number(m, "mem_used_mib", w);
      if (auto sl = number(m, "slices", w)) {
        if (*sl < 1 || *sl > d.mig_board_slices || *sl != std::floor(*sl)) bad(w, "\"slices\" must be a whole number from 1 to the board's slices");
        spec.slices = static_cast<unsigned>(*sl);
      }
      spec.gpm = parse_gpm(m, w);
      d.mig_instances.push_back(std::move(spec));
    }
  }
  auto tl = j.find("timeline");
  if (tl == j.end() || !tl->is_array() || tl->empty()) bad(where, "\"timeline\" must be a non-empty array");
  for (std::size_t i = 0; i < tl->size(); ++i) {
    std::string w = where + ".timeline[" + std::to_string(i) + "]";
    d.timeline.push_back(parse_segment((*tl)[i], w));
    if (i > 0 && d.timeline[i].t_s <= d.timeline[i - 1].t_s) bad(w, "\"t\" must increase along the timeline");
  }
  if (auto fs = j.find("faults"); fs != j.end() && !fs->is_null()) {
    if (!fs->is_array()) bad(where, "\"faults\" must be an array");
    for (std::size_t i = 0; i < fs->size(); ++i) {
      d.faults.push_back(parse_fault((*fs)[i], where + ".faults[" + std::to_string(i) + "]"));
    }
  }
  return d;
}

}  // namespace

int return_code_for(const std::string& raw) {
  static const std::map<std::string, int> codes = {
      {"SUCCESS", 0}, {"UNINITIALIZED", 1}, {"INVALID_ARGUMENT", 2}, {"NOT_SUPPORTED", 3},
      {"NO_PERMISSION", 4}, {"ALREADY_INITIALIZED", 5}, {"NOT_FOUND", 6}, {"INSUFFICIENT_SIZE", 7},
      {"INSUFFICIENT_POWER", 8}, {"DRIVER_NOT_LOADED", 9}, {"TIMEOUT", 10}, {"IRQ_ISSUE", 11},
      {"LIBRARY_NOT_FOUND", 12}, {"FUNCTION_NOT_FOUND", 13}, {"CORRUPTED_INFOROM", 14}, {"GPU_IS_LOST", 15},
      {"RESET_REQUIRED", 16}, {"OPERATING_SYSTEM", 17}, {"LIB_RM_VERSION_MISMATCH", 18}, {"IN_USE", 19},
      {"MEMORY", 20}, {"NO_DATA", 21}, {"INSUFFICIENT_RESOURCES", 23}, {"ARGUMENT_VERSION_MISMATCH", 25},
      {"NOT_READY", 27}, {"UNKNOWN", 999}};
  std::string name = raw;
  for (const char* prefix : {"NVML_", "ERROR_"}) {
    if (name.rfind(prefix, 0) == 0) name = name.substr(std::string(prefix).size());
  }
  auto it = codes.find(name);
  return it == codes.end() ? -1 : it->second;
}

std::optional<Scenario> parse_scenario(const std::string& input, const std::string& path, std::string& error) {
  auto parsed = gm::util::json_parse(input, "scenario " + path);
  if (!parsed) {
    error = parsed.error().message;
    return std::nullopt;
  }
  const json& root = *parsed;
  try {
    check_keys(root, "scenario " + path, {"driver_version", "missing_symbols", "devices"});
    Scenario s;
    if (root.contains("driver_version")) s.driver_version = text(root, "driver_version", "scenario " + path, "");
    if (auto m = root.find("missing_symbols"); m != root.end() && !m->is_null()) {
      if (!m->is_array()) bad("scenario " + path, "\"missing_symbols\" must be an array of function names");
      for (const auto& name : *m) {
        auto symbol = gm::util::json_string(&name);
        if (!symbol) bad("scenario " + path, "\"missing_symbols\" must be an array of function names");
        s.missing_symbols.push_back(std::move(*symbol));
      }
    }
    auto devs = root.find("devices");
    if (devs == root.end() || !devs->is_array()) bad("scenario " + path, "\"devices\" must be an array");
    for (std::size_t i = 0; i < devs->size(); ++i) {
      s.devices.push_back(parse_device((*devs)[i], "scenario " + path + ": devices[" + std::to_string(i) + "]", i));
    }
    return s;
  } catch (const Bad& e) {
    error = e.what();
  } catch (const json::exception& e) {
    error = "scenario " + path + ": " + e.what();
  }
  return std::nullopt;
}

const Segment& segment_at(const DeviceSpec& dev, double t_s) {
  const Segment* cur = &dev.timeline.front();
  for (const auto& s : dev.timeline) {
    if (s.t_s <= t_s) cur = &s;
  }
  return *cur;
}

bool gpm_supported(const DeviceSpec& dev) {
  for (const auto& seg : dev.timeline)
    if (seg.gpm) return true;
  for (const auto& m : dev.mig_instances)
    if (m.gpm) return true;
  return false;
}

double energy_mj_at(const DeviceSpec& dev, double t_s) {
  double mj = 0;
  for (std::size_t i = 0; i < dev.timeline.size(); ++i) {
    double start = i == 0 ? 0.0 : dev.timeline[i].t_s;
    double end = i + 1 < dev.timeline.size() ? dev.timeline[i + 1].t_s : t_s;
    if (end > t_s) end = t_s;
    if (end <= start) continue;
    mj += dev.timeline[i].power_w.value_or(0) * (end - start) * 1000.0;
  }
  return mj;
}

}  // namespace fake_nvml
