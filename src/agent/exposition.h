#pragma once
// The exposition: typed snapshots of the collector rendered as Prometheus text (format 0.0.4) and JSON.
// A serializer only: it reads a Snapshot and never samples or serves.
#include <cstddef>
#include <string>
#include <string_view>

#include "agent/collector.h"

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
/// JSON of owners and devices with dollars, $/h now, energy and GPU-seconds.
std::string render_owners_json(const Snapshot& snapshot);

}  // namespace gm::agent
