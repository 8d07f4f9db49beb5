#pragma once
// The exposition: typed snapshots of the collector rendered as Prometheus text (format 0.0.4) and JSON, the
// serializer between the collector (the model) and the server (prometheus-cpp's split). It reads snapshots
// and never samples or serves.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "agent/collector.h"
#include "agent/run_view.h"

namespace gm::agent {

// ---- exposition ---------------------------------------------------------------------------------

/// Escapes a label value for the text format: backslash, double quote and line feed.
std::string escape_label_value(std::string_view value);
/// Renders the device and owner metric families (no self metrics).
std::string render_metrics(const Snapshot& snapshot);
/// Renders the agent's own metrics.
std::string render_self_metrics(const SelfStats& self, std::size_t owners);
/// Renders the node guard's metrics: gpumeter_autostop_remaining_seconds, gpumeter_node_idle_seconds,
/// gpumeter_budget_usd / gpumeter_budget_spent_usd{scope,period}, gpumeter_preemption_notices_total
/// {provider,kind} and gpumeter_node_guard_actions_total{kind}.
std::string render_node_metrics(const NodeStatus& node);
/// Renders the runs' series (docs/agent.md "Runs"): gpumeter_run_info{run_id,pid,user} and, for a run with a
/// --target, its target (info, verdict state set, reached flag, metric level, forecast step and seconds, cost
/// to reach with its interval in dollars); a figure the forecast does not know is omitted.
std::string render_run_metrics(const std::vector<RunView>& runs);
/// JSON of owners and devices with dollars, $/h now, energy and GPU-seconds.
std::string render_owners_json(const Snapshot& snapshot);

/// A collector's Prometheus text now: its metric families, the agent's own metrics (this scrape counted) and
/// the node guard's, and the runs published in `runs_dir` (none when empty). Renders everything each call
/// (`agent --once`); the server caches through an Exporter.
std::string exposition_text(Collector& collector, const std::string& runs_dir = {});
/// A collector's owners and devices now as JSON (/api/v1/owners).
std::string owners_json(const Collector& collector);

/// What the server exports of a collector: the metric families are rendered once per collection (at the
/// first scrape after it) and cached, so 200 scrapes a second do not render 200 times. Thread-safe.
class Exporter {
 public:
  /// `runs_dir`: where runs publish their views (read once per collection); empty: no run series.
  explicit Exporter(Collector& collector, std::string runs_dir = {})
      : collector_(collector), runs_dir_(std::move(runs_dir)) {}
  /// The Prometheus text (counts a scrape).
  std::string metrics_text();

 private:
  Collector& collector_;
  std::string runs_dir_;
  std::mutex mu_;
  std::uint64_t rendered_collections_ = 0;  // the collection body_ shows (0: none yet, body_ empty)
  std::string body_;
};

}  // namespace gm::agent
