#pragma once
// The collector: samples every GPU each interval, prices the interval (meter), splits it over processes and
// their owners (DESIGN §3), keeps counters (optionally continued across restarts through a state file);
// kubelet device holders; inference endpoint discovery. Knows nothing of text formats or HTTP: the exposition
// (agent/exposition.h) renders its snapshots.
#include <array>
#include <atomic>
#include <compare>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "agent/idle.h"
#include "findings/findings.h"
#include "gpu/gpu.h"
#include "kubelet/pod_resources.h"
#include "meter/meter.h"
#include "serving/serving.h"
#include "store/store.h"
#include "sys/owner.h"
#include "util/clock.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::agent {

/// Collector settings.
struct AgentOptions {
  std::int64_t interval_ms = 1000;        ///< --interval
  std::size_t max_owners = 50;            ///< --max-owners: owner identities exposed; the rest go to "other"
  std::string state_path;                 ///< --state: counters continue across restarts ("" = none)
  std::int64_t state_every_ms = 15000;    ///< how often the state file is rewritten
  std::int64_t owner_expiry_ms = 600000;  ///< an absent owner may be dropped (when slots run out) after this
  /// --slurm-job-expiry: a Slurm job absent this long leaves the exposition; its counters fold into the
  /// "slurm_finished" owner of its user and account on each GPU (0 = never).
  std::int64_t slurm_job_expiry_ms = 300000;
  std::vector<serving::InferenceEndpointSpec> inference_endpoints;  ///< --inference-endpoint
  std::int64_t inference_timeout_ms = 2000;     ///< one scrape's limit (also bounded by the interval)
  std::int64_t inference_window_ms = 60000;     ///< window of the live $/1M tokens and $/1k requests
  std::string proc_root = "/proc";              ///< where listening sockets of engines are found
  bool inference_discover = false;              ///< --inference-discover: probe GPU processes' ports and pods
  std::string kubelet_pods_url;                 ///< --kubelet-pods-url: pod annotations (with discovery)
  std::string kubelet_token_file;               ///< --kubelet-token-file
  std::int64_t kubelet_pods_every_ms = 30'000;  ///< --kubelet-pods-every
  /// What discovery learnt besides endpoints (a server that serves no metrics, and why), for the log; called
  /// on the discovery thread. May be empty.
  std::function<void(const std::string&)> discovery_note;
};

/// Live counters of one model served by one owner.
struct InferenceModelCounters {
  sys::Owner owner;
  std::string model;
  serving::InferenceEngine engine = serving::InferenceEngine::vllm;
  double prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0, requests = 0;
  bool has_prompt = false, has_generated = false, has_cached = false, has_requests = false;
  MicroUsd cost = 0;  ///< this model's share of the owner's measured GPU cost
  /// Per booked interval over the live window: time, seconds, cost and counts (for the live ratios).
  struct Slice {
    std::int64_t t_ns = 0;
    double seconds = 0;
    MicroUsd cost = 0;
    double prompt = 0, generated = 0, requests = 0;
  };
  std::vector<Slice> window;
};

/// Scrape state of one endpoint.
struct EndpointView {
  std::string endpoint;                            ///< display URL
  std::optional<serving::InferenceEngine> engine;  ///< from the last good scrape
  bool up = false;                                 ///< last scrape succeeded
  bool linked = false;                             ///< its owner was found on a GPU
  std::map<std::string, std::uint64_t> errors;     ///< by reason
  std::string last_error;                          ///< detail of the last failure ("" after a success)
  unsigned resets = 0;                             ///< engine restarts detected
};

/// Counters of one owner on one device.
struct OwnerCounters {
  MicroUsd cost = 0;
  MicroUsd idle_cost = 0;  ///< Σ idle part of the owner's cost: cost × (1 − device utilization)
  double energy_j = 0;
  double gpu_seconds = 0;  ///< Σ weight × interval: device-seconds attributed to the owner
  MicroUsd last_cost = 0;  ///< cost of the last interval
  double last_interval_s = 0;
};

/// Counters of one MIG instance (priced by its slice fraction of the board).
struct MigCounters {
  gpu::MigInstance instance;
  MicroUsd micros_per_hour = 0;
  MicroUsd cost = 0;
  meter::CostIntegrator integrator;
};

/// The state of one device as the collector last saw it.
struct DeviceView {
  gpu::DeviceInfo info;
  gpu::Capabilities caps;
  std::optional<meter::PriceQuote> price;  ///< nullopt: no price known, cost series omitted
  std::optional<gpu::DeviceSample> last;   ///< nullopt before the first sample
  MicroUsd cost = 0;                       ///< Σ device cost
  MicroUsd idle_cost = 0;                  ///< Σ idle part of process costs
  MicroUsd unallocated_cost = 0;           ///< Σ cost with no process present
  MicroUsd idle_held_cost = 0;  ///< Σ cost of intervals under the idle threshold with a process holding it
  double energy_j = 0;
  bool energy_known = false;                    ///< power or energy counter readable
  double seconds = 0;                           ///< metered seconds
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
  std::optional<std::uint64_t>
      kubelet_pods_errors;  ///< failed asks / malformed answers of --kubelet-pods-url
};

/// The node guard's state (autostop, node and owner budgets, preemption notices) as the agent exports it;
/// the node guard (agent/node_guard.h) runs beside the collector and hands its status over each interval.
struct NodeStatus {
  std::optional<double> autostop_remaining_s;  ///< nullopt: autostop off (series omitted)
  double idle_s = 0;                           ///< how long every GPU has been idle
  bool autostop_done = false;                  ///< the command ran (or would have, dry run)
  struct Budget {
    std::string scope;                                      ///< "node", "user:alice", ...
    store::BudgetPeriod period = store::BudgetPeriod::day;  ///< day or month (never week)
    MicroUsd limit_micros = 0, spent_micros = 0;
  };
  std::vector<Budget> budgets;
  std::map<std::pair<std::string, std::string>, std::uint64_t> notices;  ///< (provider, kind) → count
  std::map<std::string, std::uint64_t> events;                           ///< guard action kind → count
  bool watching_notices = false;  ///< a metadata service is polled (the notice counters are exported)
};

/// A consistent copy of everything the collector knows.
struct Snapshot {
  std::vector<DeviceView> devices;
  std::map<std::string, sys::Owner> owners;  ///< key → owner labels (includes "other" when used)
  SelfStats self;
  std::vector<InferenceModelCounters> inference;  ///< per (owner, model)
  std::vector<EndpointView> endpoints;            ///< per --inference-endpoint
  bool inference_priced = true;                   ///< every GPU has a price (else cost series are omitted)
  std::int64_t now_ns = 0;                        ///< clock at the last collection (live window end)
  std::int64_t inference_window_ms = 60000;
};

/// What a scrape exports besides the snapshot's metric families.
struct ScrapeStats {
  SelfStats self;                  ///< the agent's own figures, this scrape counted
  std::size_t owners = 0;          ///< owner identities exposed (without "other")
  std::optional<NodeStatus> node;  ///< the node guard's status, when one runs
};

/// One owner's totals over every device of a snapshot: computed once, shown by /api/v1/owners and `top`.
struct OwnerTotal {
  std::string key;
  sys::Owner owner;
  MicroUsd cost = 0;             ///< Σ over priced devices
  MicroUsd idle_cost = 0;        ///< Σ over priced devices of the idle part of its cost
  MicroUsd micros_per_hour = 0;  ///< Σ over priced devices of the last interval's rate
  double energy_j = 0;
  double gpu_seconds = 0;
  std::vector<unsigned> gpus;  ///< device indexes, in snapshot order
};

/// Per-owner totals, most expensive first (ties by key).
std::vector<OwnerTotal> owner_totals(const Snapshot& snapshot);

/// Findings of one owner from its totals (docs/findings.md "Live owners", shown by `top`):
/// idle_gpus_held when 90 % or more of its spend went to idle GPU time, low_utilization from 50 %; the
/// dollars at its current rate. None before it has spent anything.
std::vector<findings::Finding> owner_findings(const OwnerTotal& owner);

/// The "other" owner that collects owners beyond --max-owners.
sys::Owner other_owner();

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
  std::vector<PodContainerRef> board;             ///< assigned the whole GPU (by GPU UUID or replica)
  std::vector<std::vector<PodContainerRef>> mig;  ///< per DeviceInfo::mig_instances entry (by MIG UUID)
  /// True when nobody holds any part of the device.
  bool empty() const;
};

/// Holders of each device (same order as `devices`), matching assignment UUIDs to GPU and MIG UUIDs.
std::vector<DeviceHolders> device_holders(const std::vector<gpu::DeviceInfo>& devices,
                                          const std::vector<kubelet::PodDeviceAssignment>& assignments);

/// Names pod owners from the holders of the devices their processes run on: a (pod UID, container) whose
/// processes run only on devices held by exactly one container gets that namespace, pod and container;
/// held by several containers of one pod, the namespace and pod. A match two pod UIDs would share is
/// ambiguous and dropped. `pids_by_device[i]` are the PIDs on device i; `owner_of` is updated in place.
void name_pods_from_holders(std::map<std::uint32_t, sys::Owner>& owner_of,
                            const std::vector<std::vector<std::uint32_t>>& pids_by_device,
                            const std::vector<DeviceHolders>& holders);

/// One holder's part of an interval on a device with no process.
struct HeldShare {
  PodContainerRef holder;
  MicroUsd cost = 0;
  double weight = 0;  ///< fraction of the device (energy, GPU-seconds)
};

/// Charges an interval of `device_cost` on a device with no process to its holders: the whole board split
/// equally among board holders; else each held MIG instance its slice fraction (memory fraction when slice
/// counts are unknown), split equally among that instance's holders. Σ cost ≤ device_cost; the rest is
/// unallocated.
std::vector<HeldShare> split_held_device(MicroUsd device_cost, const gpu::DeviceInfo& info,
                                         const DeviceHolders& holders);

/// What the node guard reads each interval (agent/node_guard.h), without a snapshot's copy of every counter
/// and without resolving owners again: the collector's own last collection.
struct NodeView {
  struct Gpu {
    std::optional<double> utilization_pct;  ///< nullopt: not sampled yet, lost, or not supported
    std::size_t processes = 0;
    std::vector<std::uint32_t> pids;  ///< the processes on it
  };
  std::vector<Gpu> gpus;                                            ///< in device order
  MicroUsd node_cost = 0;                                           ///< Σ cost of the priced devices
  std::vector<std::pair<sys::Owner, MicroUsd>> owner_costs;         ///< Σ over priced devices, per owner
  std::vector<std::pair<std::uint32_t, sys::Owner>> gpu_processes;  ///< PIDs on GPUs at the last collection
};

/// Samples GPUs and keeps the counters. Thread-safe: collect_once() on one thread, readers on others.
class Collector {
 public:
  /// `prices[i]` is device i's price (nullopt: unknown). Backend, resolver, clock and `pod_resources`
  /// (nullptr: not read) must outlive it.
  Collector(gpu::GpuBackend& backend, sys::OwnerResolver& owners, util::Clock& clock,
            std::vector<std::optional<meter::PriceQuote>> prices, AgentOptions options,
            kubelet::PodResourcesCache* pod_resources = nullptr);
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;
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
  /// The node guard's reading of the last collection.
  NodeView node_view() const;
  /// What one scrape exports besides a snapshot's families, read at once, with this scrape counted.
  ScrapeStats count_scrape();
  /// The node guard's latest status, exported with the metrics from now on.
  void set_node_status(NodeStatus status);
  /// Whether every GPU has been truly idle for `for_ms` (GET /v1/idle, `gpumeter idle`), from the history
  /// of states the collections booked.
  IdleAnswer idle_answer(std::int64_t for_ms) const;

 private:
  std::string owner_slot(const sys::Owner& owner, std::int64_t now_ns);
  void fold_finished_slurm_jobs(std::int64_t now_ns);
  void move_counters(const std::string& from_key, const std::string& to_key);
  sys::Owner holder_owner(const PodContainerRef& ref) const;

  gpu::GpuBackend& backend_;
  sys::OwnerResolver& resolver_;
  util::Clock& clock_;
  AgentOptions options_;
  mutable std::mutex mu_;
  std::vector<DeviceView> devices_;
  std::vector<meter::CostIntegrator> integrators_;
  std::vector<meter::EnergyMeter> energy_;
  std::map<std::string, sys::Owner> owners_;           // exposed owner identities
  std::map<std::string, std::int64_t> owner_seen_ns_;  // last interval each exposed owner was present
  SelfStats self_;
  std::optional<NodeStatus> node_;                     // the node guard's, when one runs
  std::map<std::uint32_t, sys::Owner> last_owner_of_;  // owners of the last collection's processes
  std::int64_t last_state_write_ns_ = 0;
  IdleHistory idle_history_;                             // per device, for idle_answer()
  std::optional<std::int64_t> last_collection_unix_ms_;  // wall time of the last collection
  kubelet::PodResourcesCache* pod_resources_ = nullptr;
  std::uint64_t holders_generation_ = 0;
  std::vector<DeviceHolders> holders_;  // per device, from pod_resources_
  std::map<PodContainerRef, std::pair<sys::Owner, std::int64_t>>
      pod_owner_seen_;  // owner last seen with processes

  // Serving engines (inference.cpp, inference_join.cpp).
  struct EndpointState;
  void init_endpoints();
  void link_endpoints(const std::map<std::uint32_t, sys::Owner>& owner_of,
                      const std::map<std::string, sys::Owner>& present, std::int64_t now_ns);
  void book_inference(std::vector<serving::ScrapeOutcome> outcomes,
                      const std::map<std::string, MicroUsd>& owner_cost, std::int64_t now_ns);
  void fill_inference(Snapshot& snap) const;
  nlohmann::json inference_state_json() const;         // state.cpp
  void load_inference_state(const nlohmann::json& j);  // state.cpp
  std::unique_ptr<serving::InferenceScrapers> scrapers_;
  std::unique_ptr<serving::EndpointDiscovery> discovery_;  // --inference-discover
  void add_discovered_endpoints(const std::map<std::uint32_t, sys::Owner>& owner_of);
  std::int64_t scrape_timeout_ms_ = 0;
  std::vector<std::unique_ptr<EndpointState>> endpoints_;
  std::map<std::string, MicroUsd> pending_cost_;        // linked owner key → cost not yet charged to models
  std::map<std::string, std::int64_t> last_booked_ns_;  // linked owner key → when its cost was last charged
  std::map<std::pair<std::string, std::string>, InferenceModelCounters> inference_;  // (owner key, model)
  bool inference_priced_ = true;
  std::int64_t last_collect_ns_ = 0;
};

/// Scrape, link and counter state of one endpoint (collector internals).
struct Collector::EndpointState {
  serving::InferenceEndpointSpec spec;
  EndpointView view;
  std::optional<sys::Owner> owner;            // linked owner (labels of its series)
  std::optional<std::uint32_t> listener_pid;  // process listening on the port (owner "" only)
  std::int64_t listener_checked_ns = -1;
  serving::ServedFold fold;  // the counters read while linked (baselined once a reading was taken)
  // From the state file (state.cpp): the owner and counter values of the last run of the agent, resumed when
  // the endpoint links to the same owner again, so tokens served across an agent restart count once.
  std::optional<std::string> resume_owner_key;
  std::optional<double> resume_start_time_s;
  std::map<std::string, std::array<std::optional<double>, 4>> resume_prev;
};

}  // namespace gm::agent
