#include "report/gpu_view.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "catalog/catalog.h"
#include "sys/proc.h"
#include "util/json.h"
#include "util/table.h"

namespace gm::report {

using util::json_or_null;

Result<GpuView> build_gpu_view(gpu::GpuBackend& backend, meter::PricingContext& prices) {
  GpuView view;
  sys::ProcReader procs;
  // GPM activity is measured between two samples: the backend took the first when it opened the device, so
  // one GPM window passes before the sample shown.
  bool any_gpm = false;
  for (const gpu::DeviceInfo& info : backend.devices())
    any_gpm = any_gpm || backend.capabilities(info.index).gpm;
  if (any_gpm) std::this_thread::sleep_for(std::chrono::milliseconds(kGpmWindowMs));
  for (const gpu::DeviceInfo& info : backend.devices()) {
    DeviceView v;
    v.info = info;
    v.caps = backend.capabilities(info.index);
    v.sample = backend.sample(info.index);
    v.energy_method = energy_method(v.caps);
    for (const gpu::ProcessSample& p : v.sample.processes) {
      ProcessView pv;
      pv.sample = p;
      if (auto pi = procs.read(p.pid)) pv.name = pi->comm;
      v.processes.push_back(std::move(pv));
    }
    std::optional<std::string> device_name;
    if (!info.name.empty()) device_name = info.name;
    if (device_name) {
      if (const catalog::GpuSpec* spec = prices.catalog().gpu_for_device_name(*device_name, backend.vendor()))
        v.catalog_gpu = spec->id;
    }
    // A bad --offer or --config is the user's error; a GPU without a catalog price is just unpriced.
    auto price = prices.price_for(device_name);
    if (!price) return price.error();
    if (!price->quote) {
      if (view.pricing_error.empty()) view.pricing_error = price->unpriced_reason;
    } else if (price->quote->origin != meter::PriceOrigin::none) {
      v.price_usd_per_hour = price->quote->usd_per_gpu_hour();
      v.price_source = price->quote->source;
    }
    view.devices.push_back(std::move(v));
  }
  return view;
}

namespace {

using nlohmann::json;

/// The GPM keys (percent; null where GPM is not supported).
void add_gpm_json(json& d, const gpu::GpmMetrics& g) {
  auto pct = [](const std::optional<double>& v) {
    return v ? json(std::round(*v * 10.0) / 10.0) : json(nullptr);
  };
  d["sm_active_pct"] = pct(g.sm_active_pct);
  d["sm_occupancy_pct"] = pct(g.sm_occupancy_pct);
  d["tensor_active_pct"] = pct(g.tensor_active_pct);
  d["fp32_active_pct"] = pct(g.fp32_active_pct);
  d["fp16_active_pct"] = pct(g.fp16_active_pct);
  d["fp64_active_pct"] = pct(g.fp64_active_pct);
  d["dram_bw_util_pct"] = pct(g.dram_bw_util_pct);
}

json device_json(const DeviceView& v) {
  const gpu::DeviceInfo& info = v.info;
  const gpu::DeviceSample& s = v.sample;
  json d;
  d["index"] = info.index;
  d["name"] = info.name.empty() ? json(nullptr) : json(info.name);
  d["uuid"] = info.uuid.empty() ? json(nullptr) : json(info.uuid);
  d["pci_bus_id"] = info.pci_bus_id.empty() ? json(nullptr) : json(info.pci_bus_id);
  d["architecture"] = json_or_null(info.architecture);
  d["catalog_gpu"] = json_or_null(v.catalog_gpu);
  d["memory_total_bytes"] = json_or_null(info.memory_total_bytes);
  d["memory_used_bytes"] = json_or_null(s.memory_used_bytes);
  d["utilization_pct"] = json_or_null(s.utilization_pct);
  d["power_w"] = s.power_mw ? json(*s.power_mw / 1000.0) : json(nullptr);
  d["power_limit_w"] = info.power_limit_mw ? json(*info.power_limit_mw / 1000.0) : json(nullptr);
  d["energy_j"] = s.energy_mj ? json(static_cast<double>(*s.energy_mj) / 1000.0) : json(nullptr);
  d["energy_method"] = to_string(v.energy_method);
  d["temperature_c"] = json_or_null(s.temperature_c);
  d["state"] = to_string(s.state);
  d["error"] = s.error.empty() ? json(nullptr) : json(s.error);
  d["mig_enabled"] = json_or_null(info.mig_enabled);
  add_gpm_json(d, s.gpm);
  d["price_usd_per_hour"] = json_or_null(v.price_usd_per_hour);
  d["price_source"] = json_or_null(v.price_source);
  json procs = json::array();
  for (const auto& p : v.processes) {
    procs.push_back({{"pid", p.sample.pid},
                     {"name", json_or_null(p.name)},
                     {"memory_bytes", json_or_null(p.sample.memory_bytes)},
                     {"sm_util_pct", json_or_null(p.sample.sm_util_pct)}});
  }
  d["processes"] = std::move(procs);
  json migs = json::array();
  for (const auto& m : s.mig_instances) {
    migs.push_back({{"index", m.index},
                    {"uuid", m.uuid},
                    {"gpu_instance_id", m.gpu_instance_id},
                    {"memory_total_bytes", json_or_null(m.memory_total_bytes)},
                    {"memory_used_bytes", json_or_null(m.memory_used_bytes)},
                    {"slices", json_or_null(m.slice_count)},
                    {"board_slices", json_or_null(m.board_slices)}});
    add_gpm_json(migs.back(), m.gpm);
  }
  d["mig_instances"] = std::move(migs);
  return d;
}

std::string dash_or(bool has, const std::string& text) {
  return has ? text : "-";
}

std::string render_table(const GpuView& view) {
  util::TextTable t;
  using A = util::TextTable::Align;
  t.header({"GPU", "NAME", "CATALOG", "UTIL", "TENSOR", "MEMORY", "POWER", "TEMP", "ENERGY", "STATE", "$/H",
            "PROCS"},
           {A::right, A::left, A::left, A::right, A::right, A::right, A::right, A::right, A::right, A::left,
            A::right, A::right});
  for (const auto& v : view.devices) {
    const gpu::DeviceSample& s = v.sample;
    std::string mem = "-";
    if (s.memory_used_bytes || v.info.memory_total_bytes) {
      mem = fmt::format("{}/{} MiB", s.memory_used_bytes ? std::to_string(*s.memory_used_bytes >> 20) : "-",
                        v.info.memory_total_bytes ? std::to_string(*v.info.memory_total_bytes >> 20) : "-");
    }
    std::string energy = "-";
    if (s.energy_mj) {
      double j = static_cast<double>(*s.energy_mj) / 1000.0;
      energy = j < 10000 ? fmt::format("{:.1f} J", j)
               : j < 1e7 ? fmt::format("{:.1f} kJ", j / 1e3)
                         : fmt::format("{:.2f} kWh", j / 3.6e6);
    }
    t.row({std::to_string(v.info.index), v.info.name.empty() ? "-" : v.info.name, v.catalog_gpu.value_or("-"),
           dash_or(s.utilization_pct.has_value(), fmt::format("{}%", s.utilization_pct.value_or(0))),
           dash_or(s.gpm.tensor_active_pct.has_value(),
                   fmt::format("{:.0f}%", s.gpm.tensor_active_pct.value_or(0))),
           mem, dash_or(s.power_mw.has_value(), fmt::format("{:.0f} W", s.power_mw.value_or(0) / 1000.0)),
           dash_or(s.temperature_c.has_value(), fmt::format("{} C", s.temperature_c.value_or(0))), energy,
           to_string(s.state),
           dash_or(v.price_usd_per_hour.has_value(), fmt::format("{:.2f}", v.price_usd_per_hour.value_or(0))),
           std::to_string(v.processes.size())});
  }
  std::string out = t.render();
  for (const auto& v : view.devices) {
    if (v.price_source) out += fmt::format("GPU {} price: {}\n", v.info.index, *v.price_source);
    if (!v.sample.error.empty())
      out += fmt::format("GPU {} {}: {}\n", v.info.index, to_string(v.sample.state), v.sample.error);
  }
  bool any = false;
  for (const auto& v : view.devices) any = any || !v.processes.empty();
  if (any) {
    util::TextTable p;
    p.header({"GPU", "PID", "NAME", "MEMORY", "SM"}, {A::right, A::right, A::left, A::right, A::right});
    for (const auto& v : view.devices) {
      for (const auto& proc : v.processes) {
        p.row({std::to_string(v.info.index), std::to_string(proc.sample.pid), proc.name.value_or("-"),
               proc.sample.memory_bytes ? fmt::format("{} MiB", *proc.sample.memory_bytes >> 20) : "-",
               proc.sample.sm_util_pct ? fmt::format("{}%", *proc.sample.sm_util_pct) : "-"});
      }
    }
    out += "\n" + p.render();
  }
  if (!view.pricing_error.empty()) out += "price: " + view.pricing_error + "\n";
  return out;
}

}  // namespace

std::string render_gpus_json(const GpuView& view, const std::optional<std::string>& driver_version) {
  json root;
  root["driver_version"] = json_or_null(driver_version);
  root["devices"] = json::array();
  for (const auto& d : view.devices) root["devices"].push_back(device_json(d));
  return root.dump(2) + "\n";
}

std::string render_gpus_text(const GpuView& view, const std::optional<std::string>& driver_version) {
  return fmt::format("driver {}   NVML call bound {} ms\n", driver_version.value_or("unknown"),
                     static_cast<long long>(gpu::kGpuCallTimeoutMs)) +
         render_table(view);
}

}  // namespace gm::report
