#pragma once
// The serving-engine intake, shared by the node agent and `gpumeter run --inference-endpoint`: the
// Prometheus exposition parser, the serving engines gpumeter reads (vLLM, SGLang, TGI, Triton), endpoint
// specs, counter deltas with restart detection, the per-model cost split, bounded scrapes on background
// threads, the listening sockets of processes and endpoint discovery. Knows no collector, owner or run.
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "util/http_client.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::serving {

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
  /// KV-cache usage (0-1; the largest over the model's engines), a gauge: vLLM's `vllm:kv_cache_usage_perc`,
  /// or before its rename `vllm:gpu_cache_usage_perc`.
  std::optional<double> kv_cache_usage_ratio;
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

/// Endpoints from a config file's `[agent] inference_endpoints = ["URL[,owner=NAME][,model=NAME]", ...]`;
/// none when the key is absent. Errors (usage) name the file, and line and column for TOML syntax.
Result<std::vector<InferenceEndpointSpec>> load_inference_endpoints(const std::string& config_path);

/// Counter deltas with reset detection: a value below the previous one, or a changed process start time,
/// is an engine restart and the new value counts from zero (never a negative delta, never counted twice).
/// The agent's cost join and the run supervisor's serving counters both count with it.
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

/// The counters of one model that the served-counter fold counts, in this order.
enum ServedCounter : std::size_t { kPromptTokens = 0, kGeneratedTokens, kCachedTokens, kRequests };

/// What one model served between two readings: the increase of each counter (ServedCounter order), and
/// which counters the engine reported.
struct ServedDelta {
  std::array<double, 4> counts{};
  std::array<bool, 4> has{};
};

/// The served-counter fold of one engine endpoint, used by the agent's cost join and by `gpumeter run
/// --inference-endpoint` alike: per model, the increase of each counter since the previous reading
/// (CounterDelta: a changed process start time, or a counter going back, is a restart and the new value
/// counts from zero). Non-finite values are skipped and negative ones read as 0; at most kMaxModels models
/// get counters (an engine's labels are input, not trusted).
class ServedFold {
 public:
  static constexpr std::size_t kMaxModels = 64;
  /// `count_from_zero`: everything the server served counts, its first reading too (a run's own server);
  /// false: the first reading is the baseline and only models that appear later count from zero.
  explicit ServedFold(bool count_from_zero = false) : count_from_zero_(count_from_zero) {}
  /// What one reading added.
  struct Step {
    std::map<std::string, ServedDelta> models;  ///< models of the reading that get counters
    bool restarted = false;                     ///< the engine restarted since the previous reading
  };
  /// Folds one reading.
  Step add(const EngineReading& reading);
  /// A reading was taken (or resumed).
  bool baselined() const { return baselined_; }
  std::optional<double> start_time_s() const { return start_time_s_; }
  /// Each model's previous counter values (kept in the agent's state file).
  std::map<std::string, std::array<std::optional<double>, 4>> previous() const;
  /// Continues from values read before an agent restart: the next reading counts from them.
  void resume(std::optional<double> start_time_s,
              const std::map<std::string, std::array<std::optional<double>, 4>>& previous);

 private:
  bool count_from_zero_;
  bool baselined_ = false;
  std::optional<double> start_time_s_;
  std::map<std::string, std::array<CounterDelta, 4>> deltas_;
};

/// Outcome of one scrape.
struct ScrapeOutcome {
  std::optional<EngineReading> reading;  ///< nullopt: failed (see error)
  std::string error;   ///< connect | timeout | http | too_large | parse | no_engine_metrics | deadline
  std::string detail;  ///< human-readable cause
};

/// Scrapes one endpoint once: bounded by `timeout_ms` overall (a server that trickles bytes is cut off) and
/// by a 16 MiB body limit. Sent through `http`.
ScrapeOutcome scrape_endpoint(const InferenceEndpointSpec& spec, std::int64_t timeout_ms,
                              util::HttpClient& http = util::system_http());

/// One scrape of the engine metrics of the server a supervised run wraps (`gpumeter run
/// --inference-endpoint`).
struct InferenceScrape {
  std::string endpoint;                  ///< the URL scraped ("" while none is known yet)
  std::optional<EngineReading> reading;  ///< nullopt: the scrape failed
  std::string error;                     ///< why it failed ("" on success)
};

/// Where a supervised run reads the wrapped server's engine metrics. Implementations scrape in the
/// background (the driver never waits on the network); the driver asks at every tick.
class InferenceSource {
 public:
  virtual ~InferenceSource() = default;
  /// The newest scrape finished since the last call (nullopt: none). `job_pids` are the job's processes
  /// now (for discovering the port the job listens on).
  virtual std::optional<InferenceScrape> take(const std::set<std::uint32_t>& job_pids) = 0;
};

/// The InferenceSource of `gpumeter run --inference-endpoint` (run_source.cpp): a background thread scrapes
/// the engine's /metrics every `interval_ms` (each scrape bounded by min(2 s, interval)). `url` "auto" finds
/// the endpoint: the TCP ports the job's processes listen on are probed (each once per 10 s until one
/// answers) for a /metrics that parses as a known engine. Usage error naming the flag for a bad URL.
Result<std::unique_ptr<InferenceSource>> make_engine_inference_source(const std::string& url,
                                                                      std::int64_t interval_ms);

/// Background scrapers, one thread per endpoint, so a slow endpoint never stalls the collector: a round is
/// started before the GPUs are sampled and collected after, waiting at most until a deadline.
class InferenceScrapers {
 public:
  /// `http` must outlive the scrapers (their threads are joined by the destructor).
  InferenceScrapers(std::vector<InferenceEndpointSpec> specs, std::int64_t timeout_ms,
                    util::HttpClient& http = util::system_http());
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
  util::HttpClient& http_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t round_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
};

/// The per-model split: `cost` over the models' token counts `weights` in proportion (meter's
/// split_micros: largest remainder, Σ = cost exactly); all-zero weights split equally. Empty weights give an
/// empty split.
std::vector<MicroUsd> split_cost(MicroUsd cost, const std::vector<double>& weights);

/// PID of a process with a TCP socket listening on `port` (IPv4 or IPv6), from `proc_root`/net/tcp{,6} and
/// the processes' fd links; nullopt when none is visible (another network namespace, no permission).
std::optional<std::uint32_t> find_listening_pid(const std::string& proc_root, std::uint16_t port);
/// The TCP port of an endpoint (from its URL; 80 / 443 by default).
std::uint16_t endpoint_port(const InferenceEndpointSpec& spec);

// ---- endpoint discovery (discovery.cpp) -----------------------------------------------------------

/// TCP ports that processes in `pids` listen on (IPv4 and IPv6, from `proc_root`/net/tcp{,6} and their fd
/// links), ascending.
std::vector<std::uint16_t> listening_ports(const std::string& proc_root, const std::set<std::uint32_t>& pids);
/// Why the server behind `spec` serves no engine metrics, when it tells: an SGLang server started without
/// `--enable-metrics` has no /metrics, and its /get_server_info says `"enable_metrics": false`. The text
/// names the endpoint and the flag; nullopt when the server says nothing of the kind (one bounded request).
std::optional<std::string> metrics_disabled_reason(const InferenceEndpointSpec& spec, std::int64_t timeout_ms,
                                                   util::HttpClient& http = util::system_http());

/// What probing ports found.
struct ProbeResult {
  std::optional<InferenceEndpointSpec> found;  ///< the first port whose /metrics is a known engine's
  std::vector<std::string> notes;  ///< ports probed before it that serve no metrics, with why (SGLang)
};

/// Probes http://HOST:PORT/metrics on each port in order, once, and returns the first endpoint whose answer
/// parses as one of the known engines' expositions; a port that does not is asked why
/// (metrics_disabled_reason) and noted.
ProbeResult probe_engine_ports(const std::string& host, const std::vector<std::uint16_t>& ports,
                               std::int64_t timeout_ms, util::HttpClient& http = util::system_http());

/// A pod that announces a metrics endpoint with its annotations.
struct PodScrapeTarget {
  std::string owner;  ///< "namespace/name", the owner label of a pod
  std::string url;    ///< scheme://podIP:port/path
};

/// Running pods with an IP and a `prometheus.io/port` annotation in a kubelet `/pods` PodList (JSON):
/// `prometheus.io/path` (default /metrics) and `prometheus.io/scheme` (default http) complete the URL,
/// `prometheus.io/scrape: "false"` skips the pod. Error (usage) naming `source` for text that is no PodList;
/// a pod with a part of the wrong JSON type is skipped and counted in `malformed`.
struct KubeletPodList {
  std::vector<PodScrapeTarget> targets;
  std::size_t malformed = 0;  ///< pods skipped because a part had the wrong JSON type
  std::string
      problem;  ///< the first such part: "SOURCE: items[2].metadata: expected an object, got a string"
};
/// Reads a kubelet `/pods` answer (see KubeletPodList); never throws.
Result<KubeletPodList> parse_kubelet_pods(std::string_view json_text, const std::string& source);

/// Discovery settings (`--inference-discover`).
struct DiscoveryOptions {
  std::string proc_root = "/proc";
  std::string kubelet_pods_url;            ///< the kubelet's /pods endpoint; "" = no pod annotations
  std::string kubelet_token_file;          ///< bearer token for the kubelet ("" = none)
  std::int64_t timeout_ms = 2000;          ///< one probe's limit
  std::int64_t kubelet_every_ms = 30'000;  ///< how often the kubelet's /pods is asked
  /// Called (on the discovery thread) with what a probe learnt besides endpoints: a server that serves no
  /// metrics, and why. May be empty.
  std::function<void(const std::string&)> note;
  /// Where probes and the kubelet's /pods are asked (must outlive the discovery); nullptr: the real client.
  util::HttpClient* http = nullptr;
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
  /// Failed asks of the kubelet's /pods and malformed answers (each one also noted), since the start.
  std::uint64_t kubelet_errors() const { return kubelet_errors_.load(std::memory_order_relaxed); }

 private:
  void loop();
  DiscoveryOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool offered_ = false;
  std::set<std::uint32_t> pids_;
  std::vector<InferenceEndpointSpec> found_;
  std::atomic<std::uint64_t> kubelet_errors_{0};
  std::thread thread_;
};

}  // namespace gm::serving
