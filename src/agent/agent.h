#pragma once
// The node agent: a collector that samples every GPU each interval, prices the interval (meter),
// splits it over processes and their owners (DESIGN §3), keeps counters (optionally continued across
// restarts through a state file), renders them in the Prometheus text format and JSON, and serves them
// over HTTP (optionally TLS and basic auth from an exporter-toolkit web-config file).
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

#include "gpu/gpu.h"
#include "kubelet/pod_resources.h"
#include "meter/meter.h"
#include "sys/owner.h"
#include "util/clock.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::agent {

// ---- engine metrics intake (inference serving) -----------------------------------------------

/// One sample line of a text exposition.
struct ExpositionSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  ///< in the order written, unescaped
  double value = 0;
  std::optional<std::int64_t> timestamp_ms;
  /// The value of label `label_name`, or nullptr when the sample has no such label.
  const std::string* label(std::string_view label_name) const;
};

/// A parsed Prometheus text exposition (format 0.0.4; OpenMetrics 1.0 text is accepted too).
struct Exposition {
  std::vector<ExpositionSample> samples;     ///< in document order
  std::map<std::string, std::string> types;  ///< family name → counter|gauge|histogram|summary|untyped|...
  std::map<std::string, std::string> help;   ///< family name → docstring, unescaped
};

/// Parses exposition text per the Prometheus text format: comments, HELP and TYPE lines, label values with
/// \\, \" and \n escapes, NaN/±Inf values, optional millisecond timestamps, OpenMetrics `# EOF` and
/// exemplars. One malformed line fails the whole text (as Prometheus rejects a scrape); the error names line
/// and column.
Result<Exposition> parse_exposition(std::string_view text);

/// A serving engine whose metrics gpumeter understands.
enum class InferenceEngine { vllm, sglang, tgi, triton };
/// "vllm", "sglang", "tgi", "triton".
const char* to_string(InferenceEngine engine);

/// Cumulative counters of one model as an engine reports them; nullopt where the engine has no such metric.
struct ModelTotals {
  std::optional<double> prompt_tokens;
  std::optional<double> generated_tokens;
  std::optional<double> cached_tokens;  ///< prompt tokens served from the prefix cache
  std::optional<double> requests;
};

/// What one scrape of an engine said.
struct EngineReading {
  InferenceEngine engine = InferenceEngine::vllm;
  std::map<std::string, ModelTotals> models;  ///< by model name
  std::optional<double> start_time_s;         ///< process_start_time_seconds, when exported (restarts)
};

/// Reads token and request counters from an engine's exposition, summing over every label but the model
/// (engine index, finish reason, cache source, version...). `default_model` names the model of engines that
/// label none (TGI). Error when no known engine's counters are present.
Result<EngineReading> read_engine(const Exposition& exposition, const std::string& default_model);

/// An engine endpoint to scrape (`--inference-endpoint URL[,owner=NAME][,model=NAME]`).
struct InferenceEndpointSpec {
  std::string url;                ///< as given
  std::string scheme_host_port;   ///< "http://127.0.0.1:8000"
  std::string path = "/metrics";  ///< path and query
  std::string display;            ///< the `endpoint` label: URL without user info or query
  std::string owner;              ///< the owner label to charge; "" = the process listening on the port
  std::string model = "default";  ///< model name for engines that label none (TGI)
};

/// Parses "URL[,owner=NAME][,model=NAME]"; usage error naming `flag` on anything else.
Result<InferenceEndpointSpec> parse_inference_endpoint(std::string_view text,
                                                       std::string_view flag = "--inference-endpoint");

/// Endpoints from a config file's `[agent] inference_endpoints = ["URL[,owner=NAME][,model=NAME]", ...]`; none when
/// the key is absent. Errors (usage) name the file, and line and column for TOML syntax.
Result<std::vector<InferenceEndpointSpec>> load_inference_endpoints(const std::string& config_path);

/// Counter deltas with reset detection: a value below the previous one, or a changed process start time,
/// is an engine restart and the new value counts from zero (never a negative delta, never counted twice).
class CounterDelta {
 public:
  /// The increase since the previous value (0 for the first value seen: it is the baseline).
  double add(double value, bool restarted);
  /// Makes zero the previous value (a counter that appeared after the baseline counts from zero).
  void start_from_zero() { prev_ = 0; }
  /// The previous value (nullopt before the first); kept in the state file.
  std::optional<double> previous() const { return prev_; }
  /// Continues from a previous value read before an agent restart (the state file).
  void resume_from(double prev) { prev_ = prev; }
  /// Resets seen.
  unsigned resets() const { return resets_; }

 private:
  std::optional<double> prev_;
  unsigned resets_ = 0;
};

/// Outcome of one scrape.
struct ScrapeOutcome {
  std::optional<EngineReading> reading;  ///< nullopt: failed (see error)
  std::string error;   ///< connect | timeout | http | too_large | parse | no_engine_metrics | deadline
  std::string detail;  ///< human-readable cause
};

/// Scrapes one endpoint once: bounded by `timeout_ms` overall (a server that trickles bytes is cut off) and
/// by a 16 MiB body limit.
ScrapeOutcome scrape_endpoint(const InferenceEndpointSpec& spec, std::int64_t timeout_ms);

/// Background scrapers, one thread per endpoint, so a slow endpoint never stalls the collector: a round is
/// started before the GPUs are sampled and collected after, waiting at most until a deadline.
class InferenceScrapers {
 public:
  InferenceScrapers(std::vector<InferenceEndpointSpec> specs, std::int64_t timeout_ms);
  ~InferenceScrapers();
  InferenceScrapers(const InferenceScrapers&) = delete;
  InferenceScrapers& operator=(const InferenceScrapers&) = delete;
  /// Asks every idle endpoint for a fresh scrape.
  void start_round();
  /// Outcomes of the round (same order as the specs), waiting until `deadline_ns` of real time (steady clock,
  /// nanoseconds since its epoch); an endpoint not done by then has error "deadline".
  std::vector<ScrapeOutcome> finish_round(std::int64_t deadline_ns);
  const std::vector<InferenceEndpointSpec>& specs() const { return specs_; }
  /// Adds an endpoint (a discovered one), scraped from the next round on. Call between rounds.
  void add(InferenceEndpointSpec spec);

 private:
  struct Worker;
  void start_worker(Worker* w, InferenceEndpointSpec spec);
  std::vector<InferenceEndpointSpec> specs_;
  std::int64_t timeout_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t round_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
};

/// Splits `cost` over `weights` in proportion (largest remainder, Σ = cost exactly); all-zero weights split
/// equally. Empty weights give an empty split.
std::vector<MicroUsd> split_cost(MicroUsd cost, const std::vector<double>& weights);

/// Live counters of one model served by one owner.
struct InferenceModelCounters {
  Owner owner;
  std::string model;
  InferenceEngine engine = InferenceEngine::vllm;
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
  std::string endpoint;                         ///< display URL
  std::optional<InferenceEngine> engine;        ///< from the last good scrape
  bool up = false;                              ///< last scrape succeeded
  bool linked = false;                          ///< its owner was found on a GPU
  std::map<std::string, std::uint64_t> errors;  ///< by reason
  std::string last_error;                       ///< detail of the last failure ("" after a success)
  unsigned resets = 0;                          ///< engine restarts detected
};

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
  std::vector<InferenceEndpointSpec> inference_endpoints;  ///< --inference-endpoint
  std::int64_t inference_timeout_ms = 2000;  ///< one scrape's limit (also bounded by the interval)
  std::int64_t inference_window_ms = 60000;  ///< window of the live $/1M tokens and $/1k requests
  std::string proc_root = "/proc";           ///< where listening sockets of engines are found
  bool inference_discover = false;           ///< --inference-discover: probe GPU processes' ports and pods
  std::string kubelet_pods_url;              ///< --kubelet-pods-url: pod annotations (with discovery)
  std::string kubelet_token_file;            ///< --kubelet-token-file
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
  std::vector<InferenceModelCounters> inference;  ///< per (owner, model)
  std::vector<EndpointView> endpoints;            ///< per --inference-endpoint
  bool inference_priced = true;                   ///< every GPU has a price (else cost series are omitted)
  std::int64_t now_ns = 0;                        ///< clock at the last collection (live window end)
  std::int64_t inference_window_ms = 60000;
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

class EndpointDiscovery;

/// Samples GPUs and keeps the counters. Thread-safe: collect_once() on one thread, readers on others.
class Collector {
 public:
  /// `prices[i]` is device i's price (nullopt: unknown). Backend, resolver, clock and `pod_resources`
  /// (nullptr: not read) must outlive it.
  Collector(GpuBackend& backend, OwnerResolver& owners, Clock& clock,
            std::vector<std::optional<PriceQuote>> prices, AgentOptions options,
            PodResourcesCache* pod_resources = nullptr);
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
  std::vector<DeviceHolders> holders_;  // per device, from pod_resources_
  std::map<PodContainerRef, std::pair<Owner, std::int64_t>>
      pod_owner_seen_;  // owner last seen with processes

  // Serving engines (inference.cpp, inference_join.cpp).
  struct EndpointState;
  void init_endpoints();
  void link_endpoints(const std::map<std::uint32_t, Owner>& owner_of,
                      const std::map<std::string, Owner>& present, std::int64_t now_ns);
  void book_inference(std::vector<ScrapeOutcome> outcomes, const std::map<std::string, MicroUsd>& owner_cost,
                      std::int64_t now_ns);
  void fill_inference(Snapshot& snap) const;
  nlohmann::json inference_state_json() const;          // state.cpp
  void load_inference_state(const nlohmann::json& j);  // state.cpp
  std::unique_ptr<InferenceScrapers> scrapers_;
  std::unique_ptr<EndpointDiscovery> discovery_;  // --inference-discover
  void add_discovered_endpoints(const std::map<std::uint32_t, Owner>& owner_of);
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
  InferenceEndpointSpec spec;
  EndpointView view;
  std::optional<Owner> owner;                 // linked owner (labels of its series)
  std::optional<std::uint32_t> listener_pid;  // process listening on the port (owner "" only)
  std::int64_t listener_checked_ns = -1;
  bool baselined = false;  // a reading was taken while linked
  std::optional<double> start_time_s;
  unsigned resets_seen = 0;  // Σ resets over the counters, at the last reading
  std::map<std::string, std::array<CounterDelta, 4>>
      deltas;  // per model: prompt, generated, cached, requests
  // From the state file (state.cpp): the owner and counter values of the last run of the agent, resumed when
  // the endpoint links to the same owner again, so tokens served across an agent restart count once.
  std::optional<std::string> resume_owner_key;
  std::optional<double> resume_start_time_s;
  std::map<std::string, std::array<std::optional<double>, 4>> resume_prev;
};

/// PID of a process with a TCP socket listening on `port` (IPv4 or IPv6), from `proc_root`/net/tcp{,6} and
/// the processes' fd links; nullopt when none is visible (another network namespace, no permission).
std::optional<std::uint32_t> find_listening_pid(const std::string& proc_root, std::uint16_t port);
/// The TCP port of an endpoint (from its URL; 80 / 443 by default).
std::uint16_t endpoint_port(const InferenceEndpointSpec& spec);

// ---- endpoint discovery (discovery.cpp) -----------------------------------------------------------

/// TCP ports that processes in `pids` listen on (IPv4 and IPv6, from `proc_root`/net/tcp{,6} and their fd
/// links), ascending.
std::vector<std::uint16_t> listening_ports(const std::string& proc_root, const std::set<std::uint32_t>& pids);
/// Probes http://HOST:PORT/metrics on each port in order, once, and returns the first endpoint whose answer
/// parses as one of the known engines' expositions; nullopt when none does.
std::optional<InferenceEndpointSpec> probe_engine_ports(const std::string& host,
                                                        const std::vector<std::uint16_t>& ports,
                                                        std::int64_t timeout_ms);

/// A pod that announces a metrics endpoint with its annotations.
struct PodScrapeTarget {
  std::string owner;  ///< "namespace/name", the owner label of a pod
  std::string url;    ///< scheme://podIP:port/path
};

/// Running pods with an IP and a `prometheus.io/port` annotation in a kubelet `/pods` PodList (JSON):
/// `prometheus.io/path` (default /metrics) and `prometheus.io/scheme` (default http) complete the URL,
/// `prometheus.io/scrape: "false"` skips the pod. Error (usage) naming `source` for text that is no PodList.
Result<std::vector<PodScrapeTarget>> parse_kubelet_pods(std::string_view json_text,
                                                        const std::string& source);

/// Discovery settings (`--inference-discover`).
struct DiscoveryOptions {
  std::string proc_root = "/proc";
  std::string kubelet_pods_url;    ///< the kubelet's /pods endpoint; "" = no pod annotations
  std::string kubelet_token_file;  ///< bearer token for the kubelet ("" = none)
  std::int64_t timeout_ms = 2000;  ///< one probe's limit
  std::int64_t kubelet_every_ms = 30'000;
};

/// Finds engine endpoints on a background thread (the collector never waits for a probe): the TCP ports the
/// offered GPU processes, and their parents in the same cgroup (up to 4 levels), listen on (in the agent's
/// network namespace), each probed once at 127.0.0.1, and
/// the pods the kubelet announces with prometheus.io annotations, each URL probed once. Endpoints whose
/// /metrics parses as a known engine are handed out once by take_found().
class EndpointDiscovery {
 public:
  explicit EndpointDiscovery(DiscoveryOptions options);
  ~EndpointDiscovery();
  EndpointDiscovery(const EndpointDiscovery&) = delete;
  EndpointDiscovery& operator=(const EndpointDiscovery&) = delete;
  /// The GPU processes of this interval.
  void offer(std::set<std::uint32_t> gpu_pids);
  /// Endpoints found since the last call.
  std::vector<InferenceEndpointSpec> take_found();

 private:
  void loop();
  DiscoveryOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool offered_ = false;
  std::set<std::uint32_t> pids_;
  std::vector<InferenceEndpointSpec> found_;
  std::thread thread_;
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
