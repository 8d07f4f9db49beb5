#pragma once
// The node agent: a collector that samples every GPU each interval, prices the interval (meter),
// splits it over processes and their owners (DESIGN §3), keeps counters (optionally continued across
// restarts through a state file), renders them in the Prometheus text format and JSON, and serves them
// over HTTP (optionally TLS and basic auth from an exporter-toolkit web-config file).
#include <atomic>
#include <compare>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu.h"
#include "kubelet/pod_resources.h"
#include "meter/meter.h"
#include "sys/owner.h"
#include "util/clock.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::agent {

/// Collector settings.
struct AgentOptions {
  std::int64_t interval_ms = 1000;         ///< --interval
  std::size_t max_owners = 50;             ///< --max-owners: owner identities exposed; the rest go to "other"
  std::string state_path;                  ///< --state: counters continue across restarts ("" = none)
  std::int64_t state_every_ms = 15000;     ///< how often the state file is rewritten
  std::int64_t owner_expiry_ms = 600000;   ///< an absent owner may be dropped (when slots run out) after this
  /// --slurm-job-expiry: a Slurm job absent this long leaves the exposition; its counters fold into the
  /// "slurm_finished" owner of its user and account on each GPU (0 = never).
  std::int64_t slurm_job_expiry_ms = 300000;
};

/// Counters of one owner on one device.
struct OwnerCounters {
  MicroUsd cost = 0;
  MicroUsd idle_cost = 0;                  ///< Σ idle part of the owner's cost: cost × (1 − device utilization)
  double energy_j = 0;
  double gpu_seconds = 0;                  ///< Σ weight × interval: device-seconds attributed to the owner
  MicroUsd last_cost = 0;                  ///< cost of the last interval
  double last_interval_s = 0;
};

/// Counters of one MIG instance (priced by its slice fraction of the board).
struct MigCounters {
  MigInstance instance;
  MicroUsd micros_per_hour = 0;
  MicroUsd cost = 0;
  CostIntegrator integrator;
};

/// The state of one device as the collector last saw it.
struct DeviceView {
  DeviceInfo info;
  Capabilities caps;
  std::optional<PriceQuote> price;         ///< nullopt: no price known, cost series omitted
  std::optional<DeviceSample> last;        ///< nullopt before the first sample
  MicroUsd cost = 0;                       ///< Σ device cost
  MicroUsd idle_cost = 0;                  ///< Σ idle part of process costs
  MicroUsd unallocated_cost = 0;           ///< Σ cost with no process present
  double energy_j = 0;
  bool energy_known = false;               ///< power or energy counter readable
  double seconds = 0;                      ///< metered seconds
  std::map<std::string, OwnerCounters> owners;  ///< by Owner::key() (exposed owners and "other")
  std::vector<MigCounters> mig;
};

/// Self metrics of the agent.
struct SelfStats {
  std::uint64_t collections = 0;
  std::uint64_t scrapes = 0;
  double last_collection_s = 0;
  double collection_seconds_total = 0;
  std::uint64_t state_write_errors = 0;
  std::int64_t started_unix_ms = 0;
  std::optional<bool> pod_resources_up;    ///< nullopt: pod-resources socket disabled (series omitted)
  std::uint64_t pod_resources_errors = 0;  ///< failed asks of the kubelet pod-resources socket
};

/// A consistent copy of everything the collector knows.
struct Snapshot {
  std::vector<DeviceView> devices;
  std::map<std::string, Owner> owners;     ///< key → owner labels (includes "other" when used)
  SelfStats self;
};

/// The "other" owner that collects owners beyond --max-owners.
Owner other_owner();

/// A stop request that wakes a waiting thread at once (no polling while idle).
class StopSignal {
 public:
  /// Asks every waiter to stop; idempotent.
  void request();
  /// True once request() was called.
  bool requested() const { return stop_.load(); }
  /// Waits `ns` of real time, or less when stop is requested; returns requested().
  bool wait_ns(std::int64_t ns);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
};

// ---- Kubernetes device assignments (kubelet pod-resources) ------------------------------------

/// A container of a pod, as the kubelet names it.
struct PodContainerRef {
  std::string pod_namespace;
  std::string pod;
  std::string container;
  auto operator<=>(const PodContainerRef&) const = default;
};

/// The containers the kubelet assigned (parts of) one device to.
struct DeviceHolders {
  std::vector<PodContainerRef> board;                  ///< assigned the whole GPU (by GPU UUID or replica)
  std::vector<std::vector<PodContainerRef>> mig;       ///< per DeviceInfo::mig_instances entry (by MIG UUID)
  /// True when nobody holds any part of the device.
  bool empty() const;
};

/// Holders of each device (same order as `devices`), matching assignment UUIDs to GPU and MIG UUIDs.
std::vector<DeviceHolders> device_holders(const std::vector<DeviceInfo>& devices,
                                          const std::vector<PodDeviceAssignment>& assignments);

/// Names pod owners from the holders of the devices their processes run on: a (pod UID, container) whose
/// processes run only on devices held by exactly one container gets that namespace, pod and container;
/// held by several containers of one pod, the namespace and pod. A match two pod UIDs would share is
/// ambiguous and dropped. `pids_by_device[i]` are the PIDs on device i; `owner_of` is updated in place.
void name_pods_from_holders(std::map<std::uint32_t, Owner>& owner_of,
                            const std::vector<std::vector<std::uint32_t>>& pids_by_device,
                            const std::vector<DeviceHolders>& holders);

/// One holder's part of an interval on a device with no process.
struct HeldShare {
  PodContainerRef holder;
  MicroUsd cost = 0;
  double weight = 0;                                   ///< fraction of the device (energy, GPU-seconds)
};

/// Charges an interval of `device_cost` on a device with no process to its holders: the whole board split
/// equally among board holders; else each held MIG instance its slice fraction (memory fraction when slice
/// counts are unknown), split equally among that instance's holders. Σ cost ≤ device_cost; the rest is
/// unallocated.
std::vector<HeldShare> split_held_device(MicroUsd device_cost, const DeviceInfo& info, const DeviceHolders& holders);

/// Samples GPUs and keeps the counters. Thread-safe: collect_once() on one thread, readers on others.
class Collector {
 public:
  /// `prices[i]` is device i's price (nullopt: unknown). Backend, resolver, clock and `pod_resources` (nullptr:
  /// not read) must outlive it.
  Collector(GpuBackend& backend, OwnerResolver& owners, Clock& clock, std::vector<std::optional<PriceQuote>> prices,
            AgentOptions options, PodResourcesCache* pod_resources = nullptr);
  /// Loads counters from options.state_path when it exists (a missing file is not an error).
  Result<void> load_state();
  /// Writes counters to options.state_path atomically (temp file + rename).
  Result<void> save_state() const;
  /// Samples every device once and books the interval since the previous sample.
  void collect_once();
  /// Runs collect_once() every interval until `stop`; writes the state file periodically and at the end.
  /// Waits between intervals in real time (the clock only schedules).
  void run(StopSignal& stop);
  /// A copy of the current state.
  Snapshot snapshot() const;
  /// The Prometheus text exposition (counts a scrape).
  std::string exposition();
  /// Owners and devices as JSON (/api/v1/owners).
  std::string owners_json() const;

 private:
  std::string owner_slot(const Owner& owner, std::int64_t now_ns);
  void fold_finished_slurm_jobs(std::int64_t now_ns);
  void move_counters(const std::string& from_key, const std::string& to_key);
  Owner holder_owner(const PodContainerRef& ref) const;

  GpuBackend& backend_;
  OwnerResolver& resolver_;
  Clock& clock_;
  AgentOptions options_;
  mutable std::mutex mu_;
  std::vector<DeviceView> devices_;
  std::vector<CostIntegrator> integrators_;
  std::vector<EnergyMeter> energy_;
  std::map<std::string, Owner> owners_;                 // exposed owner identities
  std::map<std::string, std::int64_t> owner_seen_ns_;   // last interval each exposed owner was present
  SelfStats self_;
  std::string body_;                                    // exposition without self metrics, rebuilt per interval
  std::int64_t last_state_write_ns_ = 0;
  PodResourcesCache* pod_resources_ = nullptr;
  std::uint64_t holders_generation_ = 0;
  std::vector<DeviceHolders> holders_;                  // per device, from pod_resources_
  std::map<PodContainerRef, std::pair<Owner, std::int64_t>> pod_owner_seen_;  // owner last seen with processes
};

// ---- exposition ---------------------------------------------------------------------------------

/// Escapes a label value for the text format: backslash, double quote and line feed.
std::string escape_label_value(std::string_view value);
/// Renders the device and owner metric families (no self metrics).
std::string render_metrics(const Snapshot& snapshot);
/// Renders the agent's own metrics.
std::string render_self_metrics(const SelfStats& self, std::size_t owners);
/// JSON of owners and devices with dollars, $/h now, energy and GPU-seconds.
std::string render_owners_json(const Snapshot& snapshot);

// ---- HTTP -----------------------------------------------------------------------------------------

/// An exporter-toolkit web configuration (the subset gpumeter supports).
struct WebConfig {
  std::string cert_file;                               ///< tls_server_config.cert_file (absolute)
  std::string key_file;                                ///< tls_server_config.key_file (absolute)
  std::map<std::string, std::string> basic_auth_users; ///< user → bcrypt hash
};

/// Parses a web-config YAML text; relative paths are taken relative to `base_dir`. Errors name line numbers.
Result<WebConfig> parse_web_config(std::string_view yaml, const std::string& file_name, const std::string& base_dir);
/// Loads and parses a web-config file.
Result<WebConfig> load_web_config(const std::string& path);
/// True when `password` matches the crypt(3) `hash` (bcrypt $2y$/$2b$/$2a$ and others libcrypt knows).
bool verify_password(const std::string& password, const std::string& hash);

/// HTTP server settings.
struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 9835;
  std::optional<WebConfig> web;
};

/// Parses "HOST:PORT" or ":PORT" (host defaults to 127.0.0.1; "[::1]:PORT" for IPv6).
Result<ServeOptions> parse_listen(std::string_view text);

/// An HTTP server over a collector: /metrics, / (live page), /api/v1/owners.
class Server {
 public:
  Server(Collector& collector, ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  /// Binds; error (unavailable) names the address when it cannot.
  Result<void> bind();
  /// Serves until stop() (blocking).
  void listen();
  /// Stops listen() from another thread.
  void stop();
  /// The bound port.
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ServeOptions options_;
  int port_ = 0;
};

// ---- fleet report (Prometheus) ------------------------------------------------------------------

/// One group of a fleet report.
struct FleetRow {
  std::string key;                                     ///< namespace / slurm job / user / "instance gpu model"; "" = none
  double cost_usd = 0;
  std::optional<double> energy_j;                      ///< nullopt when no series had energy
  std::optional<double> gpu_seconds;
};

/// Fleet totals and groups over a time range, from PromQL increase() over the agents' counters.
struct FleetReport {
  std::string by;                                      ///< namespace | job | user | gpu
  std::int64_t range_ms = 0;
  double device_cost_usd = 0;                          ///< Σ increase(gpumeter_gpu_cost_usd_total)
  double owner_cost_usd = 0;                           ///< Σ increase(gpumeter_owner_cost_usd_total)
  double unallocated_cost_usd = 0;
  double idle_cost_usd = 0;
  std::vector<FleetRow> rows;                          ///< most expensive first
};

/// Queries Prometheus at `prometheus_url` (http://host:port) for the last `range_ms`, grouped `by`.
/// Errors: usage for a bad `by`/URL, unavailable when Prometheus cannot be reached or answers an error.
Result<FleetReport> query_fleet_report(const std::string& prometheus_url, std::int64_t range_ms, const std::string& by);

/// One answer of the Prometheus HTTP API to an instant query: its HTTP status and body.
struct PrometheusAnswer {
  int http_status = 0;
  std::string body;
};
/// Asks one PromQL instant query; error (unavailable) when Prometheus cannot be reached.
using PrometheusQuery = std::function<Result<PrometheusAnswer>(const std::string& promql)>;
/// query_fleet_report over any source of answers (tests, fuzzing); `prometheus_url` is only used in messages.
/// Answers that are not a Prometheus vector of finite numbers are errors (unavailable), never numbers.
Result<FleetReport> fleet_report_from(const PrometheusQuery& query, const std::string& prometheus_url,
                                      std::int64_t range_ms, const std::string& by);

}  // namespace gm::agent
