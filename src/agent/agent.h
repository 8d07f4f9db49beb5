#pragma once
// The node agent: a collector that samples every GPU each interval, prices the interval (meter),
// splits it over processes and their owners (DESIGN §3), keeps counters (optionally continued across
// restarts through a state file), renders them in the Prometheus text format and JSON, and serves them
// over HTTP (optionally TLS and basic auth from an exporter-toolkit web-config file).
// The node agent's public header, in layers: collector (agent/collector.h, over the serving-engine intake of
// serving/serving.h) -> exposition (agent/exposition.h) -> server (agent/server.h), and beside the
// collector the node guard (agent/node_guard.h: autostop, node and owner budgets, notices). Code inside the
// agent includes only the layer it needs.
#include "agent/collector.h"
#include "agent/exposition.h"
#include "agent/node_guard.h"
#include "agent/server.h"
