// Discovery of serving engines' metrics endpoints: the TCP ports a set of processes listens on (from
// /proc/net/tcp{,6} and the processes' socket fds), probed once each for a /metrics that parses as one of
// the known engines.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <sstream>

#include "serving/detail/proc_net.h"
#include "serving/serving.h"
#include "sys/proc.h"
#include "util/file.h"
#include "util/json_in.h"

namespace gm::serving {

std::vector<std::uint16_t> listening_ports(const std::string& proc_root,
                                           const std::set<std::uint32_t>& pids) {
  std::map<std::string, std::uint16_t> by_link;
  for (const char* table : {"/net/tcp", "/net/tcp6"})
    if (auto text = util::read_small_file(proc_root + table)) detail::listen_table(*text, by_link);
  std::set<std::uint16_t> ports;
  if (by_link.empty()) return {};
  for (std::uint32_t pid : pids) {
    const std::string dir = proc_root + "/" + std::to_string(pid) + "/fd";
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (dirent* ent = ::readdir(d)) {
      if (ent->d_name[0] == '.') continue;
      char buf[64];
      const ssize_t n = ::readlink((dir + "/" + ent->d_name).c_str(), buf, sizeof buf);
      if (n <= 0 || n >= static_cast<ssize_t>(sizeof buf)) continue;
      if (auto it = by_link.find(std::string(buf, static_cast<std::size_t>(n))); it != by_link.end())
        ports.insert(it->second);
    }
    ::closedir(d);
  }
  return {ports.begin(), ports.end()};
}

std::optional<std::string> metrics_disabled_reason(const InferenceEndpointSpec& spec, std::int64_t timeout_ms,
                                                   util::HttpClient& http) {
  // SGLang (python/sglang/srt/entrypoints/http_server.py) answers /get_server_info with its server
  // arguments, `enable_metrics` among them; without the flag it mounts no /metrics at all.
  util::HttpRequest request;
  request.scheme_host_port = spec.scheme_host_port;
  request.path = "/get_server_info";
  request.headers = {{"Accept", "application/json"}};
  request.connect_timeout = request.read_timeout = request.write_timeout =
      std::chrono::milliseconds(timeout_ms);
  const auto res = http.send(request);
  if (!res || res->status != 200 || res->body.size() > (4u << 20)) return std::nullopt;
  const auto j = util::json_parse(res->body, "/get_server_info");
  if (!j || util::json_bool(*j, "enable_metrics") != false) return std::nullopt;
  std::string model;
  if (auto path = util::json_string(*j, "model_path")) model = " (" + *path + ")";
  return spec.scheme_host_port + " is an SGLang server" + model +
         " started without --enable-metrics: it serves no /metrics; restart it with --enable-metrics";
}

ProbeResult probe_engine_ports(const std::string& host, const std::vector<std::uint16_t>& ports,
                               std::int64_t timeout_ms, util::HttpClient& http) {
  ProbeResult out;
  for (std::uint16_t port : ports) {
    const std::string url = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                            ":" + std::to_string(port) + "/metrics";
    auto spec = parse_inference_endpoint(url, "discovery");
    if (!spec) continue;
    const ScrapeOutcome scrape = scrape_endpoint(*spec, timeout_ms, http);
    if (scrape.reading) {
      out.found = std::move(*spec);
      return out;
    }
    // A server that answered HTTP may say why it has no metrics.
    if (scrape.error == "http")
      if (auto why = metrics_disabled_reason(*spec, timeout_ms, http)) out.notes.push_back(std::move(*why));
  }
  return out;
}

Result<KubeletPodList> parse_kubelet_pods(std::string_view json_text, const std::string& source) {
  const auto j = util::json_parse(json_text, source);
  if (!j) return make_error(ErrorKind::usage, j.error().message + ": not a kubelet PodList");
  const nlohmann::json* items = util::json_array(*j, "items");
  if (!items)
    return make_error(ErrorKind::usage, source + ": not a kubelet PodList: " +
                                            (j->is_object() ? util::JsonPath("items").wrong_type(
                                                                  "an array", util::json_member(*j, "items"))
                                                            : util::JsonPath().wrong_type("an object", &*j)));
  KubeletPodList out;
  // A pod part of the wrong JSON type skips that pod; the first such part is named in `problem`.
  auto malformed = [&](const util::JsonPath& where, std::string_view expected, const nlohmann::json* v) {
    if (out.problem.empty()) out.problem = source + ": " + where.wrong_type(expected, v);
  };
  const util::JsonPath items_path("items");
  for (std::size_t i = 0; i < items->size(); ++i) {
    const nlohmann::json& pod = (*items)[i];
    const util::JsonPath at = items_path / i;
    if (!pod.is_object()) {
      malformed(at, "an object", &pod);
      ++out.malformed;
      continue;
    }
    bool ok = true;
    // Members that must be objects when present; absent reads as empty.
    auto object_part = [&](const nlohmann::json& parent, const util::JsonPath& where,
                           std::string_view key) -> const nlohmann::json* {
      const nlohmann::json* v = util::json_member(parent, key);
      if (v == nullptr || v->is_object()) return v;
      malformed(where / key, "an object", v);
      ok = false;
      return nullptr;
    };
    const nlohmann::json* meta = object_part(pod, at, "metadata");
    const nlohmann::json* status = object_part(pod, at, "status");
    const nlohmann::json* ann = meta ? object_part(*meta, at / "metadata", "annotations") : nullptr;
    if (!ok) {
      ++out.malformed;
      continue;
    }
    // Strings that are present with another type make the pod malformed; absent ones read as "".
    auto text = [&](const nlohmann::json* parent, const util::JsonPath& where,
                    std::string_view key) -> std::string {
      const nlohmann::json* v = parent ? util::json_member(*parent, key) : nullptr;
      if (v == nullptr) return {};
      if (auto s = util::json_string(v)) return *s;
      malformed(where / key, "a string", v);
      ok = false;
      return {};
    };
    const util::JsonPath meta_at = at / "metadata", status_at = at / "status",
                         ann_at = meta_at / "annotations";
    const std::string port = text(ann, ann_at, "prometheus.io/port"), ip = text(status, status_at, "podIP");
    const std::string phase = text(status, status_at, "phase"),
                      scrape = text(ann, ann_at, "prometheus.io/scrape");
    std::string path = text(ann, ann_at, "prometheus.io/path");
    const std::string scheme_text = text(ann, ann_at, "prometheus.io/scheme");
    const std::string ns = text(meta, meta_at, "namespace"), name = text(meta, meta_at, "name");
    if (!ok) {
      ++out.malformed;
      continue;
    }
    if (port.empty() || ip.empty() || phase != "Running") continue;
    if (scrape == "false") continue;
    unsigned p = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || end != port.data() + port.size() || p == 0 || p > 65535) continue;
    if (path.empty()) path = "/metrics";
    if (path.front() != '/') path.insert(0, "/");
    const std::string scheme = scheme_text == "https" ? "https" : "http";
    const std::string host = ip.find(':') != std::string::npos ? "[" + ip + "]" : ip;
    if (name.empty()) continue;
    out.targets.push_back(
        {ns.empty() ? name : ns + "/" + name, scheme + "://" + host + ":" + std::to_string(p) + path});
  }
  return out;
}

namespace {

/// GETs the kubelet's /pods (bounded by `timeout_ms`), with a bearer token when a token file is given.
Result<std::string> fetch_pods(const DiscoveryOptions& o) {
  auto spec = parse_inference_endpoint(o.kubelet_pods_url, "--kubelet-pods-url");
  if (!spec) return spec.error();
  util::HttpRequest request;
  request.scheme_host_port = spec->scheme_host_port;
  request.path = spec->path;
  request.connect_timeout = request.read_timeout = std::chrono::milliseconds(o.timeout_ms);
  request.headers = {{"Accept", "application/json"}};
  if (!o.kubelet_token_file.empty()) {
    auto token = util::read_small_file(o.kubelet_token_file);
    if (!token)
      return make_error(ErrorKind::unavailable,
                        "--kubelet-token-file " + o.kubelet_token_file + ": cannot read");
    while (!token->empty() && (token->back() == '\n' || token->back() == ' ')) token->pop_back();
    request.headers.emplace_back("Authorization", "Bearer " + *token);
  }
  const auto res = (o.http ? *o.http : util::system_http()).send(request);
  if (!res)
    return make_error(ErrorKind::unavailable,
                      o.kubelet_pods_url + ": " + util::http_failure_name(res.failure()));
  if (res->status != 200)
    return make_error(ErrorKind::unavailable,
                      o.kubelet_pods_url + ": HTTP status " + std::to_string(res->status));
  return res->body;
}

}  // namespace

EndpointDiscovery::EndpointDiscovery(DiscoveryOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { loop(); });
}

EndpointDiscovery::~EndpointDiscovery() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EndpointDiscovery::offer(std::set<std::uint32_t> gpu_pids) {
  {
    std::lock_guard lock(mu_);
    pids_ = std::move(gpu_pids);
    offered_ = true;
  }
  cv_.notify_all();
}

std::vector<InferenceEndpointSpec> EndpointDiscovery::take_found() {
  std::lock_guard lock(mu_);
  return std::exchange(found_, {});
}

void EndpointDiscovery::loop() {
  util::HttpClient& http = options_.http ? *options_.http : util::system_http();
  std::set<std::uint16_t> probed_ports;  // each listening port is probed once
  std::set<std::string> probed_urls;     // each announced pod URL is probed once
  std::int64_t next_kubelet_ms = 0;
  const auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_ || offered_; });
    if (stop_) return;
    std::set<std::uint32_t> pids = pids_;
    offered_ = false;
    lock.unlock();
    // The process that serves HTTP may be the parent of the one on the GPU (vLLM's API server starts its
    // engine core): parents in the same cgroup, a few levels up, are asked too.
    const sys::ProcReader proc(options_.proc_root);
    for (std::uint32_t pid : std::set<std::uint32_t>(pids)) {
      auto info = proc.read(pid);
      for (int up = 0; up < 4 && info && info->ppid > 1; ++up) {
        auto parent = proc.read(info->ppid);
        if (!parent || parent->cgroup != info->cgroup) break;
        pids.insert(info->ppid);
        info = std::move(parent);
      }
    }
    std::vector<InferenceEndpointSpec> found;
    std::vector<std::uint16_t> fresh;
    for (std::uint16_t port : listening_ports(options_.proc_root, pids))
      if (probed_ports.insert(port).second) fresh.push_back(port);
    const auto stopping = [this] {
      std::lock_guard guard(mu_);
      return stop_;
    };
    for (std::uint16_t port : fresh) {
      if (stopping()) return;  // shutting down: the remaining probes are not needed
      ProbeResult probe = probe_engine_ports("127.0.0.1", {port}, options_.timeout_ms, http);
      if (probe.found) found.push_back(std::move(*probe.found));
      if (options_.note)
        for (const auto& n : probe.notes) options_.note(n);
    }
    if (!options_.kubelet_pods_url.empty() && now_ms() >= next_kubelet_ms) {
      next_kubelet_ms = now_ms() + options_.kubelet_every_ms;
      // One error (counted, and one note) per failed ask or malformed answer; discovery goes on.
      auto fail = [this](const std::string& why) {
        kubelet_errors_.fetch_add(1, std::memory_order_relaxed);
        if (options_.note) options_.note(why);
      };
      std::vector<PodScrapeTarget> targets;
      if (auto body = fetch_pods(options_); !body) {
        fail(body.error().message);
      } else if (auto list = parse_kubelet_pods(*body, options_.kubelet_pods_url); !list) {
        fail(list.error().message);
      } else {
        if (list->malformed > 0)
          fail(list->problem +
               (list->malformed > 1 ? " (and " + std::to_string(list->malformed - 1) + " more malformed pods)"
                                    : std::string()) +
               "; those pods are skipped");
        targets = std::move(list->targets);
      }
      for (const auto& t : targets) {
        if (stopping()) return;
        if (!probed_urls.insert(t.url).second) continue;
        auto spec = parse_inference_endpoint(t.url + ",owner=" + t.owner, "prometheus.io annotation");
        if (!spec) continue;
        const ScrapeOutcome scrape = scrape_endpoint(*spec, options_.timeout_ms, http);
        if (scrape.reading)
          found.push_back(*spec);
        else if (scrape.error == "http" && options_.note)
          if (auto why = metrics_disabled_reason(*spec, options_.timeout_ms, http)) options_.note(*why);
      }
    }
    lock.lock();
    for (auto& f : found) found_.push_back(std::move(f));
  }
}

}  // namespace gm::serving
