// Prometheus text exposition (format 0.0.4) and the owners JSON.
#include "agent/exposition.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "util/json.h"

namespace gm::agent {

using meter::PriceOrigin;
using util::usd_decimal;

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {

const char* price_source(PriceOrigin o) {
  switch (o) {
    case PriceOrigin::flag_price:
      return "price_flag";
    case PriceOrigin::flag_offer:
      return "offer";
    case PriceOrigin::config_file:
      return "config_file";
    case PriceOrigin::detected_instance:
      return "detected_instance";
    case PriceOrigin::catalog_reference:
      return "catalog_reference";
    case PriceOrigin::none:
      break;
  }
  return "none";
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// Writes HELP/TYPE lines only once the family has a sample: a family the hardware cannot give is omitted.
struct Family {
  std::string out;
  std::string pending;
  void head(const char* name, const char* type, const char* help) {
    pending = fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void add(const std::string& line) {
    out += pending;
    pending.clear();
    out += line;
  }
};

std::string device_labels(const DeviceView& d) {
  return fmt::format("gpu=\"{}\",uuid=\"{}\",model=\"{}\"", d.info.index, escape_label_value(d.info.uuid),
                     escape_label_value(d.info.name));
}

std::string owner_labels(const sys::Owner& o) {
  std::string s = fmt::format("kind=\"{}\",owner=\"{}\"", to_string(o.kind), escape_label_value(o.name));
  const std::pair<const char*, const std::string*> extra[] = {
      {"namespace", &o.pod_namespace}, {"pod", &o.pod},
      {"container", &o.container},     {"slurm_job", &o.slurm_job},
      {"account", &o.slurm_account},   {"user", &o.user}};
  for (const auto& [name, value] : extra)
    if (!value->empty()) s += fmt::format(",{}=\"{}\"", name, escape_label_value(*value));
  return s;
}

// Owner labels of inference series: `owner_kind` instead of `kind`, which names the token kind there.
std::string inference_labels(const InferenceModelCounters& m) {
  return "owner_" + owner_labels(m.owner) + fmt::format(",model=\"{}\"", escape_label_value(m.model));
}

// Live ratios over the window: Σ cost ÷ Σ count, and the cost at the window's peak generation rate.
struct WindowSums {
  MicroUsd cost = 0;
  double seconds = 0, prompt = 0, generated = 0, requests = 0, peak_generated_per_s = 0;
};

WindowSums window_sums(const InferenceModelCounters& m, std::int64_t now_ns, std::int64_t window_ms) {
  WindowSums w;
  for (const auto& sl : m.window) {
    if (sl.t_ns <= now_ns - window_ms * 1'000'000) continue;
    w.cost += sl.cost;
    w.seconds += sl.seconds;
    w.prompt += sl.prompt;
    w.generated += sl.generated;
    w.requests += sl.requests;
    if (sl.seconds > 0) w.peak_generated_per_s = std::max(w.peak_generated_per_s, sl.generated / sl.seconds);
  }
  return w;
}

void render_inference(Family& f, const Snapshot& s) {
  const auto& models = s.inference;
  f.head("gpumeter_inference_tokens_total", "counter",
         "Tokens a serving engine processed for a model since metering began, by kind (prompt, generated, "
         "cached prompt tokens).");
  for (const auto& m : models) {
    const std::string l = inference_labels(m);
    if (m.has_prompt)
      f.add(fmt::format("gpumeter_inference_tokens_total{{{},kind=\"prompt\"}} {}\n", l,
                        number(m.prompt_tokens)));
    if (m.has_generated)
      f.add(fmt::format("gpumeter_inference_tokens_total{{{},kind=\"generated\"}} {}\n", l,
                        number(m.generated_tokens)));
    if (m.has_cached)
      f.add(fmt::format("gpumeter_inference_tokens_total{{{},kind=\"cached\"}} {}\n", l,
                        number(m.cached_tokens)));
  }
  f.head("gpumeter_inference_requests_total", "counter",
         "Requests a serving engine completed for a model since metering began.");
  for (const auto& m : models)
    if (m.has_requests)
      f.add(fmt::format("gpumeter_inference_requests_total{{{}}} {}\n", inference_labels(m),
                        number(m.requests)));
  if (s.inference_priced) {
    f.head("gpumeter_inference_cost_usd_total", "counter",
           "Measured GPU cost of the owner serving a model, split across its models by generated tokens, in "
           "USD.");
    for (const auto& m : models)
      f.add(fmt::format("gpumeter_inference_cost_usd_total{{{}}} {}\n", inference_labels(m),
                        usd_decimal(m.cost)));
    f.head("gpumeter_inference_usd_per_1m_tokens", "gauge",
           "Live cost of one million tokens over the agent's window: cost / tokens x 1e6, for generated "
           "tokens and "
           "for all (prompt + generated) tokens, in USD.");
    for (const auto& m : models) {
      const WindowSums w = window_sums(m, s.now_ns, s.inference_window_ms);
      const double c = util::micros_to_usd(w.cost);
      if (m.has_generated && w.generated > 0)
        f.add(fmt::format("gpumeter_inference_usd_per_1m_tokens{{{},kind=\"generated\"}} {}\n",
                          inference_labels(m), number(meter::usd_per_million(c, w.generated))));
      if (m.has_generated && m.has_prompt && w.generated + w.prompt > 0)
        f.add(fmt::format("gpumeter_inference_usd_per_1m_tokens{{{},kind=\"total\"}} {}\n",
                          inference_labels(m), number(meter::usd_per_million(c, w.generated + w.prompt))));
    }
    f.head("gpumeter_inference_usd_per_1k_requests", "gauge",
           "Live cost of one thousand requests over the agent's window: cost / requests x 1e3, in USD.");
    for (const auto& m : models) {
      const WindowSums w = window_sums(m, s.now_ns, s.inference_window_ms);
      if (m.has_requests && w.requests > 0)
        f.add(fmt::format("gpumeter_inference_usd_per_1k_requests{{{}}} {}\n", inference_labels(m),
                          number(*meter::usd_per_units(w.cost, w.requests, 1e3))));
    }
    f.head(
        "gpumeter_inference_usd_per_1m_tokens_at_peak", "gauge",
        "Cost of one million generated tokens if the same GPU cost ran at the window's peak generation rate "
        "(cost per second / peak tokens per second x 1e6), in USD.");
    for (const auto& m : models) {
      const WindowSums w = window_sums(m, s.now_ns, s.inference_window_ms);
      if (m.has_generated && w.peak_generated_per_s > 0 && w.seconds > 0)
        f.add(fmt::format("gpumeter_inference_usd_per_1m_tokens_at_peak{{{}}} {}\n", inference_labels(m),
                          number(*meter::usd_per_units(w.cost, w.seconds * w.peak_generated_per_s, 1e6))));
    }
  }
  f.head("gpumeter_inference_load_ratio", "gauge",
         "Mean generation rate over the window divided by its peak interval rate (0-1).");
  for (const auto& m : models) {
    const WindowSums w = window_sums(m, s.now_ns, s.inference_window_ms);
    if (m.has_generated && w.peak_generated_per_s > 0 && w.seconds > 0)
      f.add(fmt::format("gpumeter_inference_load_ratio{{{}}} {}\n", inference_labels(m),
                        number(w.generated / w.seconds / w.peak_generated_per_s)));
  }
  if (s.endpoints.empty()) return;
  f.head("gpumeter_inference_endpoint_up", "gauge",
         "1 when the last scrape of a serving engine's metrics succeeded, else 0.");
  for (const auto& e : s.endpoints)
    f.add(fmt::format("gpumeter_inference_endpoint_up{{endpoint=\"{}\"}} {}\n",
                      escape_label_value(e.endpoint), e.up ? 1 : 0));
  f.head("gpumeter_inference_endpoint_linked", "gauge",
         "1 when the owner serving from an endpoint was found on a GPU (its cost can be joined), else 0.");
  for (const auto& e : s.endpoints)
    f.add(fmt::format("gpumeter_inference_endpoint_linked{{endpoint=\"{}\"}} {}\n",
                      escape_label_value(e.endpoint), e.linked ? 1 : 0));
  f.head("gpumeter_inference_scrape_errors_total", "counter",
         "Failed scrapes of a serving engine's metrics, by reason (connect, timeout, deadline, http, "
         "too_large, parse, "
         "no_engine_metrics).");
  for (const auto& e : s.endpoints)
    for (const char* reason :
         {"connect", "timeout", "deadline", "http", "too_large", "parse", "no_engine_metrics"}) {
      auto it = e.errors.find(reason);
      f.add(fmt::format("gpumeter_inference_scrape_errors_total{{endpoint=\"{}\",reason=\"{}\"}} {}\n",
                        escape_label_value(e.endpoint), reason, it == e.errors.end() ? 0 : it->second));
    }
  f.head("gpumeter_inference_engine_restarts_total", "counter",
         "Restarts of a serving engine detected from its counters going back (or a new process start time).");
  for (const auto& e : s.endpoints)
    f.add(fmt::format("gpumeter_inference_engine_restarts_total{{endpoint=\"{}\"}} {}\n",
                      escape_label_value(e.endpoint), e.resets));
}

template <class Fn>
void per_device(Family& f, const Snapshot& s, const char* name, Fn value) {
  for (const auto& d : s.devices)
    if (auto v = value(d)) f.add(fmt::format("{}{{{}}} {}\n", name, device_labels(d), *v));
}

}  // namespace

std::string render_metrics(const Snapshot& s) {
  Family f;
  using Opt = std::optional<std::string>;
  auto sample_ok = [](const DeviceView& d) { return d.last && d.last->state == gpu::DeviceState::ok; };

  f.head("gpumeter_gpu_up", "gauge",
         "1 when the last sample of the GPU succeeded, 0 when it is lost or unresponsive.");
  per_device(f, s, "gpumeter_gpu_up", [&](const DeviceView& d) -> Opt {
    if (!d.last) return std::nullopt;
    return d.last->state == gpu::DeviceState::ok ? "1" : "0";
  });
  f.head("gpumeter_gpu_price_usd_per_hour", "gauge",
         "Price of one GPU-hour of this device, labelled with where it came from.");
  for (const auto& d : s.devices)
    if (d.price)
      f.add(fmt::format("gpumeter_gpu_price_usd_per_hour{{{},source=\"{}\"}} {}\n", device_labels(d),
                        price_source(d.price->origin), usd_decimal(d.price->micros_per_gpu_hour)));
  f.head("gpumeter_gpu_cost_usd_total", "counter", "Cost of the GPU since metering began, in USD.");
  per_device(f, s, "gpumeter_gpu_cost_usd_total",
             [](const DeviceView& d) -> Opt { return d.price ? Opt(usd_decimal(d.cost)) : std::nullopt; });
  f.head("gpumeter_gpu_idle_cost_usd_total", "counter",
         "Part of process costs spent while the GPU was not busy (cost x (1 - utilization)), in USD.");
  per_device(f, s, "gpumeter_gpu_idle_cost_usd_total", [](const DeviceView& d) -> Opt {
    return d.price && d.caps.utilization ? Opt(usd_decimal(d.idle_cost)) : std::nullopt;
  });
  f.head("gpumeter_gpu_unallocated_cost_usd_total", "counter",
         "Cost of intervals with no process on the GPU, in USD.");
  per_device(f, s, "gpumeter_gpu_unallocated_cost_usd_total", [](const DeviceView& d) -> Opt {
    return d.price ? Opt(usd_decimal(d.unallocated_cost)) : std::nullopt;
  });
  f.head("gpumeter_gpu_idle_held_cost_usd_total", "counter",
         "Cost of intervals in which processes held the GPU (memory in use) while it was under the idle "
         "threshold (a waiting kernel, a stuck job), in USD.");
  per_device(f, s, "gpumeter_gpu_idle_held_cost_usd_total", [](const DeviceView& d) -> Opt {
    return d.price && d.caps.utilization ? Opt(usd_decimal(d.idle_held_cost)) : std::nullopt;
  });
  f.head("gpumeter_gpu_energy_joules_total", "counter",
         "Energy used by the GPU since metering began, in joules.");
  per_device(f, s, "gpumeter_gpu_energy_joules_total", [](const DeviceView& d) -> Opt {
    return d.energy_known ? Opt(number(d.energy_j)) : std::nullopt;
  });
  f.head("gpumeter_gpu_utilization_ratio", "gauge",
         "Fraction of the last sample period in which a kernel ran (0-1).");
  per_device(f, s, "gpumeter_gpu_utilization_ratio", [&](const DeviceView& d) -> Opt {
    if (!sample_ok(d) || !d.last->utilization_pct) return std::nullopt;
    return number(*d.last->utilization_pct / 100.0);
  });
  // GPM activity (Hopper and newer): a series only where the device answers the metric.
  const struct {
    const char* name;
    const char* help;
    std::optional<double> gpu::GpmMetrics::*field;
  } gpm_families[] = {
      {"gpumeter_gpu_sm_active_ratio",
       "Fraction of SMs with a warp resident over the last sample period (NVML GPM, 0-1).",
       &gpu::GpmMetrics::sm_active_pct},
      {"gpumeter_gpu_sm_occupancy_ratio",
       "Resident warps over the SMs' maximum over the last sample period (NVML GPM, 0-1).",
       &gpu::GpmMetrics::sm_occupancy_pct},
      {"gpumeter_gpu_tensor_active_ratio",
       "Fraction of the last sample period any tensor-core pipe was busy (NVML GPM, 0-1).",
       &gpu::GpmMetrics::tensor_active_pct},
      {"gpumeter_gpu_fp32_active_ratio",
       "Fraction of the last sample period the FP32 pipe was busy (NVML GPM, 0-1).",
       &gpu::GpmMetrics::fp32_active_pct},
      {"gpumeter_gpu_fp16_active_ratio",
       "Fraction of the last sample period the FP16 pipe was busy (NVML GPM, 0-1).",
       &gpu::GpmMetrics::fp16_active_pct},
      {"gpumeter_gpu_fp64_active_ratio",
       "Fraction of the last sample period the FP64 pipe was busy (NVML GPM, 0-1).",
       &gpu::GpmMetrics::fp64_active_pct},
      {"gpumeter_gpu_dram_bw_util_ratio",
       "DRAM bandwidth used over the last sample period, of the peak (NVML GPM, 0-1).",
       &gpu::GpmMetrics::dram_bw_util_pct},
  };
  for (const auto& fam : gpm_families) {
    f.head(fam.name, "gauge", fam.help);
    per_device(f, s, fam.name, [&](const DeviceView& d) -> Opt {
      if (!sample_ok(d) || !(d.last->gpm.*fam.field)) return std::nullopt;
      return number(*(d.last->gpm.*fam.field) / 100.0);
    });
  }
  f.head("gpumeter_gpu_memory_used_bytes", "gauge", "GPU memory in use, in bytes.");
  per_device(f, s, "gpumeter_gpu_memory_used_bytes", [&](const DeviceView& d) -> Opt {
    if (!sample_ok(d) || !d.last->memory_used_bytes) return std::nullopt;
    return std::to_string(*d.last->memory_used_bytes);
  });
  f.head("gpumeter_gpu_memory_total_bytes", "gauge", "GPU memory size, in bytes.");
  per_device(f, s, "gpumeter_gpu_memory_total_bytes", [](const DeviceView& d) -> Opt {
    return d.info.memory_total_bytes ? Opt(std::to_string(*d.info.memory_total_bytes)) : std::nullopt;
  });
  f.head("gpumeter_gpu_power_watts", "gauge", "GPU power draw, in watts.");
  per_device(f, s, "gpumeter_gpu_power_watts", [&](const DeviceView& d) -> Opt {
    if (!sample_ok(d) || !d.last->power_mw) return std::nullopt;
    return number(*d.last->power_mw / 1000.0);
  });
  f.head("gpumeter_gpu_temperature_celsius", "gauge", "GPU core temperature, in degrees Celsius.");
  per_device(f, s, "gpumeter_gpu_temperature_celsius", [&](const DeviceView& d) -> Opt {
    if (!sample_ok(d) || !d.last->temperature_c) return std::nullopt;
    return std::to_string(*d.last->temperature_c);
  });
  f.head("gpumeter_gpu_processes", "gauge", "Processes on the GPU at the last sample.");
  per_device(f, s, "gpumeter_gpu_processes", [&](const DeviceView& d) -> Opt {
    if (!sample_ok(d) || !d.caps.processes) return std::nullopt;
    return std::to_string(d.last->processes.size());
  });

  bool any_mig = false;
  for (const auto& d : s.devices) any_mig = any_mig || !d.mig.empty();
  if (any_mig) {
    f.head("gpumeter_mig_price_usd_per_hour", "gauge",
           "Price of a MIG instance per hour: the board price times its slice fraction.");
    for (const auto& d : s.devices)
      for (const auto& m : d.mig)
        f.add(fmt::format("gpumeter_mig_price_usd_per_hour{{{},mig_uuid=\"{}\",gpu_instance=\"{}\"}} {}\n",
                          device_labels(d), escape_label_value(m.instance.uuid), m.instance.gpu_instance_id,
                          usd_decimal(m.micros_per_hour)));
    f.head("gpumeter_mig_cost_usd_total", "counter", "Cost of a MIG instance since metering began, in USD.");
    for (const auto& d : s.devices)
      for (const auto& m : d.mig)
        f.add(fmt::format("gpumeter_mig_cost_usd_total{{{},mig_uuid=\"{}\",gpu_instance=\"{}\"}} {}\n",
                          device_labels(d), escape_label_value(m.instance.uuid), m.instance.gpu_instance_id,
                          usd_decimal(m.cost)));
  }

  auto owner_family = [&](const char* name, const char* help, auto value, bool needs_price, bool needs_energy,
                          bool needs_util = false) {
    f.head(name, "counter", help);
    for (const auto& d : s.devices) {
      if ((needs_price && !d.price) || (needs_energy && !d.energy_known) ||
          (needs_util && !d.caps.utilization))
        continue;
      for (const auto& [key, oc] : d.owners) {
        auto it = s.owners.find(key);
        if (it == s.owners.end()) continue;
        f.add(fmt::format("{}{{{},{}}} {}\n", name, device_labels(d), owner_labels(it->second), value(oc)));
      }
    }
  };
  owner_family(
      "gpumeter_owner_cost_usd_total", "Cost attributed to an owner on a GPU, in USD.",
      [](const OwnerCounters& c) { return usd_decimal(c.cost); }, true, false);
  owner_family(
      "gpumeter_owner_idle_cost_usd_total",
      "Idle part of an owner's cost on a GPU (cost times one minus device utilization), in USD.",
      [](const OwnerCounters& c) { return usd_decimal(c.idle_cost); }, true, false, true);
  owner_family(
      "gpumeter_owner_energy_joules_total", "Energy attributed to an owner on a GPU, in joules.",
      [](const OwnerCounters& c) { return number(c.energy_j); }, false, true);
  owner_family(
      "gpumeter_owner_gpu_seconds_total",
      "Device-seconds attributed to an owner on a GPU (its share of each interval).",
      [](const OwnerCounters& c) { return number(c.gpu_seconds); }, false, false);
  render_inference(f, s);
  return f.out;
}

std::string render_self_metrics(const SelfStats& self, std::size_t owners) {
  Family f;
  auto head = [&f](const char* name, const char* type, const char* help) {
    f.out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  head("gpumeter_agent_collections_total", "counter", "Collection intervals completed.");
  f.out += fmt::format("gpumeter_agent_collections_total {}\n", self.collections);
  head("gpumeter_agent_collection_duration_seconds", "gauge", "Duration of the last collection, in seconds.");
  f.out += fmt::format("gpumeter_agent_collection_duration_seconds {}\n", number(self.last_collection_s));
  head("gpumeter_agent_collection_seconds_total", "counter", "Time spent collecting, in seconds.");
  f.out += fmt::format("gpumeter_agent_collection_seconds_total {}\n", number(self.collection_seconds_total));
  head("gpumeter_agent_scrapes_total", "counter", "Scrapes of /metrics served.");
  f.out += fmt::format("gpumeter_agent_scrapes_total {}\n", self.scrapes);
  head("gpumeter_agent_owners", "gauge", "Owner identities exposed (bounded by --max-owners).");
  f.out += fmt::format("gpumeter_agent_owners {}\n", owners);
  head("gpumeter_agent_state_write_errors_total", "counter", "Failed writes of the state file.");
  f.out += fmt::format("gpumeter_agent_state_write_errors_total {}\n", self.state_write_errors);
  head("gpumeter_agent_start_time_seconds", "gauge", "Unix time the agent started, in seconds.");
  f.out += fmt::format("gpumeter_agent_start_time_seconds {}\n",
                       number(static_cast<double>(self.started_unix_ms) / 1000.0));
  if (self.pod_resources_up) {
    head("gpumeter_agent_pod_resources_up", "gauge",
         "1 when the last ask of the kubelet pod-resources socket succeeded, else 0.");
    f.out += fmt::format("gpumeter_agent_pod_resources_up {}\n", *self.pod_resources_up ? 1 : 0);
    head("gpumeter_agent_pod_resources_errors_total", "counter",
         "Failed asks of the kubelet pod-resources socket (a missing socket is not counted).");
    f.out += fmt::format("gpumeter_agent_pod_resources_errors_total {}\n", self.pod_resources_errors);
  }
  if (self.kubelet_pods_errors) {
    head("gpumeter_agent_kubelet_pods_errors_total", "counter",
         "Failed asks of --kubelet-pods-url and malformed answers (not a PodList, or pods with parts of the "
         "wrong JSON type).");
    f.out += fmt::format("gpumeter_agent_kubelet_pods_errors_total {}\n", *self.kubelet_pods_errors);
  }
  return f.out;
}

std::string render_node_metrics(const NodeStatus& node) {
  std::string out;
  auto head = [&out](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  if (node.autostop_remaining_s) {
    head("gpumeter_autostop_remaining_seconds", "gauge",
         "Seconds until --autostop-command runs if every GPU stays idle (0 once it ran).");
    out += fmt::format("gpumeter_autostop_remaining_seconds {}\n", number(*node.autostop_remaining_s));
    head("gpumeter_node_idle_seconds", "gauge",
         "How long every GPU has been idle (under 5% and no process).");
    out += fmt::format("gpumeter_node_idle_seconds {}\n", number(node.idle_s));
  }
  if (!node.budgets.empty()) {
    head("gpumeter_budget_usd", "gauge", "Node and owner budgets of this agent, per period.");
    for (const auto& b : node.budgets)
      out += fmt::format("gpumeter_budget_usd{{scope=\"{}\",period=\"{}\"}} {}\n",
                         escape_label_value(b.scope), util::text_of(b.period), usd_decimal(b.limit_micros));
    head("gpumeter_budget_spent_usd", "gauge", "Spend counted against each budget in its current period.");
    for (const auto& b : node.budgets)
      out += fmt::format("gpumeter_budget_spent_usd{{scope=\"{}\",period=\"{}\"}} {}\n",
                         escape_label_value(b.scope), util::text_of(b.period), usd_decimal(b.spent_micros));
  }
  if (node.watching_notices) {
    head("gpumeter_preemption_notices_total", "counter",
         "Preemption and maintenance notices read from the cloud's metadata service.");
    for (const auto& [k, n] : node.notices)
      out += fmt::format("gpumeter_preemption_notices_total{{provider=\"{}\",kind=\"{}\"}} {}\n",
                         escape_label_value(k.first), escape_label_value(k.second), n);
  }
  if (!node.events.empty()) {
    head("gpumeter_node_guard_actions_total", "counter", "Actions of the node guard (autostop, budgets).");
    for (const auto& [kind, n] : node.events)
      out +=
          fmt::format("gpumeter_node_guard_actions_total{{kind=\"{}\"}} {}\n", escape_label_value(kind), n);
  }
  return out;
}

std::string render_run_metrics(const std::vector<RunView>& runs) {
  Family f;
  auto id = [](const RunView& r) {
    return fmt::format("run_id=\"{}\",pid=\"{}\"", r.run_id > 0 ? std::to_string(r.run_id) : std::string(),
                       r.meter_pid);
  };
  f.head("gpumeter_run_info", "gauge",
         "A run metered on this node (gpumeter run|attach) that publishes its live view; 1 while it runs.");
  for (const auto& r : runs)
    f.add(fmt::format("gpumeter_run_info{{{},user=\"{}\"}} 1\n", id(r), escape_label_value(r.user)));
  f.head("gpumeter_run_target_info", "gauge", "A run's --target: the metric, its comparison and the value.");
  for (const auto& r : runs)
    if (r.target)
      f.add(fmt::format("gpumeter_run_target_info{{{},metric=\"{}\",op=\"{}\",value=\"{}\"}} 1\n", id(r),
                        escape_label_value(r.target->target.metric),
                        r.target->target.at_most ? "<=" : ">=", number(r.target->target.threshold)));
  f.head("gpumeter_run_target_verdict", "gauge",
         "The target forecast's verdict as a state set: 1 for the verdict now, 0 for the others.");
  for (const auto& r : runs)
    if (r.target)
      for (meter::TargetVerdict v :
           {meter::TargetVerdict::too_early, meter::TargetVerdict::on_track, meter::TargetVerdict::reached,
            meter::TargetVerdict::unreachable_within_steps, meter::TargetVerdict::unreachable_within_budget})
        f.add(fmt::format("gpumeter_run_target_verdict{{{},verdict=\"{}\"}} {}\n", id(r),
                          meter::verdict_name(v), r.target->forecast.verdict == v ? 1 : 0));
  f.head("gpumeter_run_target_reached", "gauge", "1 once the run has reached its target, else 0.");
  for (const auto& r : runs)
    if (r.target)
      f.add(fmt::format("gpumeter_run_target_reached{{{}}} {}\n", id(r),
                        r.target->forecast.verdict == meter::TargetVerdict::reached ? 1 : 0));
  using Field = std::optional<double> meter::TargetForecast::*;
  const struct {
    const char* name;
    Field field;
    const char* help;
  } values[] = {
      {"gpumeter_run_target_metric_value", &meter::TargetForecast::current_value,
       "The target metric's recent level (median of the last points)."},
      {"gpumeter_run_target_forecast_step", &meter::TargetForecast::reached_at_step,
       "The step at which the target is forecast to be reached (or was reached)."},
      {"gpumeter_run_target_forecast_seconds", &meter::TargetForecast::reached_at_s,
       "Seconds from the run's start at which the target is forecast to be reached (or was reached)."},
      {"gpumeter_run_target_cost_to_reach_usd", &meter::TargetForecast::cost_to_reach_usd,
       "The run's total cost in dollars when the target is reached (central forecast, or what it cost)."},
      {"gpumeter_run_target_cost_to_reach_low_usd", &meter::TargetForecast::low_usd,
       "Low end of the interval of the cost to reach the target, over the plausible fits."},
      {"gpumeter_run_target_cost_to_reach_high_usd", &meter::TargetForecast::high_usd,
       "High end of the interval of the cost to reach the target; absent when a plausible fit never reaches "
       "it."},
  };
  for (const auto& v : values) {
    f.head(v.name, "gauge", v.help);
    for (const auto& r : runs)
      if (r.target && r.target->forecast.*(v.field))
        f.add(fmt::format("{}{{{}}} {}\n", v.name, id(r), number(*(r.target->forecast.*(v.field)))));
  }
  return f.out;
}

std::string render_owners_json(const Snapshot& s) {
  using nlohmann::json;
  json devices = json::array();
  for (const auto& d : s.devices) {
    json dj = {{"gpu", d.info.index}, {"uuid", d.info.uuid}, {"model", d.info.name}};
    dj["up"] = d.last ? json(d.last->state == gpu::DeviceState::ok) : json(nullptr);
    dj["state"] = d.last ? json(to_string(d.last->state)) : json(nullptr);
    dj["price_usd_per_hour"] = d.price ? json(d.price->usd_per_gpu_hour()) : json(nullptr);
    dj["price_source"] = d.price ? json(d.price->source) : json(nullptr);
    dj["cost_usd"] = d.price ? json(util::micros_to_usd(d.cost)) : json(nullptr);
    dj["unallocated_cost_usd"] = d.price ? json(util::micros_to_usd(d.unallocated_cost)) : json(nullptr);
    dj["idle_cost_usd"] = d.price ? json(util::micros_to_usd(d.idle_cost)) : json(nullptr);
    dj["idle_held_cost_usd"] =
        d.price && d.caps.utilization ? json(util::micros_to_usd(d.idle_held_cost)) : json(nullptr);
    dj["energy_j"] = d.energy_known ? json(d.energy_j) : json(nullptr);
    const bool ok = d.last && d.last->state == gpu::DeviceState::ok;
    dj["utilization_ratio"] =
        ok && d.last->utilization_pct ? json(*d.last->utilization_pct / 100.0) : json(nullptr);
    dj["memory_used_bytes"] = ok ? util::json_or_null(d.last->memory_used_bytes) : json(nullptr);
    dj["power_w"] = ok && d.last->power_mw ? json(*d.last->power_mw / 1000.0) : json(nullptr);
    dj["processes"] = ok ? json(d.last->processes.size()) : json(nullptr);
    auto ratio = [&](const std::optional<double>& pct) {
      return ok && pct ? json(*pct / 100.0) : json(nullptr);
    };
    dj["tensor_active_ratio"] = ratio(ok ? d.last->gpm.tensor_active_pct : std::nullopt);
    dj["sm_active_ratio"] = ratio(ok ? d.last->gpm.sm_active_pct : std::nullopt);
    dj["dram_bw_util_ratio"] = ratio(ok ? d.last->gpm.dram_bw_util_pct : std::nullopt);
    devices.push_back(dj);
  }
  json list = json::array();
  for (const OwnerTotal& t : owner_totals(s)) {
    const sys::Owner& o = t.owner;
    json oj = {{"kind", to_string(o.kind)},
               {"owner", o.name},
               {"cost_usd", util::micros_to_usd(t.cost)},
               {"usd_per_hour", util::micros_to_usd(t.micros_per_hour)},
               {"energy_j", t.energy_j},
               {"gpu_seconds", t.gpu_seconds},
               {"gpus", t.gpus}};
    const std::pair<const char*, const std::string*> extra[] = {
        {"namespace", &o.pod_namespace}, {"pod", &o.pod},
        {"container", &o.container},     {"slurm_job", &o.slurm_job},
        {"account", &o.slurm_account},   {"user", &o.user}};
    for (const auto& [n, v] : extra) oj[n] = v->empty() ? json(nullptr) : json(*v);
    list.push_back(std::move(oj));
  }
  json root = {{"devices", devices}, {"owners", list}, {"collections", s.self.collections}};
  return root.dump();
}

namespace {

std::string published_runs(const std::string& runs_dir) {
  if (runs_dir.empty()) return {};
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return render_run_metrics(read_run_views(runs_dir, now_ms, process_alive));
}

std::string scrape_tail(const ScrapeStats& stats) {
  return render_self_metrics(stats.self, stats.owners) +
         (stats.node ? render_node_metrics(*stats.node) : std::string());
}

}  // namespace

std::string exposition_text(Collector& collector, const std::string& runs_dir) {
  const ScrapeStats stats = collector.count_scrape();
  // Before the first collection there is nothing to render but the agent's own metrics.
  return (stats.self.collections == 0 ? std::string() : render_metrics(collector.snapshot())) +
         published_runs(runs_dir) + scrape_tail(stats);
}

std::string owners_json(const Collector& collector) {
  return render_owners_json(collector.snapshot());
}

std::string Exporter::metrics_text() {
  std::lock_guard lock(mu_);
  const ScrapeStats stats = collector_.count_scrape();
  if (stats.self.collections != rendered_collections_) {
    body_ = render_metrics(collector_.snapshot()) + published_runs(runs_dir_);
    rendered_collections_ = stats.self.collections;
  }
  return body_ + scrape_tail(stats);
}

}  // namespace gm::agent
