// gpumeter agent: per-owner GPU cost on this node as Prometheus metrics.
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "agent/agent.h"
#include "cli/agent_node.h"
#include "cli/agent_setup.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "serving/serving.h"
#include "util/units.h"

namespace gm::cli {

Result<std::vector<std::optional<meter::PriceQuote>>> agent_prices(const meter::PricingOptions& pricing,
                                                                   const gpu::GpuBackend& backend) {
  auto context = meter::PricingContext::open(pricing, std::make_unique<meter::DmiInstanceDetector>());
  if (!context) return context.error();
  std::vector<std::optional<meter::PriceQuote>> prices;
  for (const auto& d : backend.devices()) {
    auto price = context->price_for(d.name);
    if (!price) return price.error();
    if (!price->quote)
      std::fprintf(stderr, "gpumeter agent: GPU %u (%s): no price known (%s); cost series omitted\n", d.index,
                   d.name.c_str(), price->unpriced_reason.c_str());
    prices.push_back(price->quote);
  }
  return prices;
}

Result<PricedDevices> open_priced_devices(const meter::PricingOptions& pricing) {
  auto backend = gpu::open_gpu_backend();
  if (!backend) return backend.error();
  auto prices = agent_prices(pricing, **backend);
  if (!prices) return prices.error();
  return PricedDevices{std::move(*backend), std::move(*prices)};
}

void add_owner_flags(CLI::App& app, OwnerFlags& flags) {
  app.add_option("--proc-root", flags.owners.proc_root, "the /proc tree to read owners from");
  app.add_option("--pod-log-root", flags.owners.pod_log_root, "kubelet pod log directory (pod names)");
  app.add_option("--container-log-root", flags.owners.container_log_root,
                 "kubelet container log directory (container names)");
  app.add_option("--pod-resources-socket", flags.pod_resources_socket,
                 "kubelet pod-resources socket: pod names and GPUs held by pods (default " +
                     std::string(kubelet::kDefaultPodResourcesSocket) + "; \"\" disables)");
}

Result<std::int64_t> parse_interval_flag(const std::string& text) {
  auto ms = util::parse_duration_ms(text);
  if (!ms || *ms < 10)
    return make_error(ErrorKind::usage, "--interval '" + text + "': expected a duration of at least 10ms");
  return *ms;
}

PodResourcesSetup::PodResourcesSetup(const std::string& socket_path, util::Clock& clock) {
  if (socket_path.empty()) return;
  source_ = std::make_unique<kubelet::KubeletPodResources>(socket_path);
  cache_ = std::make_unique<kubelet::PodResourcesCache>(*source_, clock);
}

int cmd_agent(int argc, char** argv) {
  CLI::App app("per-owner GPU cost on this node as Prometheus metrics", "agent");
  meter::PricingOptions pricing;
  add_pricing_flags(app, pricing);
  std::string interval = "1s", listen = "127.0.0.1:9835", web_config, state, slurm_job_expiry = "5m";
  std::size_t max_owners = 50;
  OwnerFlags owner_flags;
  bool once = false;
  app.add_option("--interval", interval, "sampling interval (default 1s)");
  app.add_option("--listen", listen, "address to serve on, HOST:PORT (default 127.0.0.1:9835)");
  app.add_option("--web-config", web_config,
                 "exporter-toolkit web config (TLS certificate, basic-auth users)");
  app.add_option("--state", state, "state file: counters continue across restarts");
  std::string runs_dir = agent::default_runs_dir();
  app.add_option("--runs-dir", runs_dir,
                 "where gpumeter run|attach publish their live views, exported as gpumeter_run_* series "
                 "(default $GPUMETER_RUNS_DIR, else /run/gpumeter/runs; \"\" = none)");
  app.add_option("--max-owners", max_owners,
                 "owners exposed as their own series; the rest are summed as \"other\"")
      ->check(positive_number());
  app.add_option("--slurm-job-expiry", slurm_job_expiry,
                 "a Slurm job absent this long folds into its user's and account's slurm_finished series "
                 "(default 5m, 0 = never)");
  add_owner_flags(app, owner_flags);
  std::vector<std::string> inference_endpoints;
  std::string inference_window = "60s";
  app.add_option(
      "--inference-endpoint", inference_endpoints,
      "a serving engine's Prometheus endpoint, URL[,owner=NAME][,model=NAME] (vLLM, SGLang, TGI, Triton); "
      "repeatable. Without owner=, the process listening on the URL's port is found in /proc");
  app.add_option("--inference-window", inference_window,
                 "window of the live $ per 1M tokens and $ per 1k requests (default 60s)");
  bool inference_discover = false;
  std::string kubelet_pods_url, kubelet_token_file, kubelet_pods_every = "30s";
  app.add_flag(
      "--inference-discover", inference_discover,
      "find serving engines without --inference-endpoint: the TCP ports GPU processes listen on are "
      "probed once for a known engine's /metrics (and pods' prometheus.io/port with --kubelet-pods-url)");
  app.add_option("--kubelet-pods-url", kubelet_pods_url,
                 "the kubelet's /pods endpoint (e.g. http://127.0.0.1:10255/pods): pods announcing "
                 "prometheus.io/port are probed (with --inference-discover)");
  app.add_option("--kubelet-token-file", kubelet_token_file, "bearer token file for --kubelet-pods-url");
  app.add_option("--kubelet-pods-every", kubelet_pods_every,
                 "how often --kubelet-pods-url is asked (default 30s, at least 1s)");
  app.add_flag("--once", once, "sample twice one interval apart, print the exposition and exit");
  NodeGuardFlags node_flags;
  add_node_guard_flags(app, node_flags);
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  auto interval_ms = parse_interval_flag(interval);
  if (!interval_ms) return fail("agent", interval_ms.error());
  auto slurm_expiry_ms = util::parse_duration_ms(slurm_job_expiry);
  if (!slurm_expiry_ms)
    return fail("agent",
                make_error(ErrorKind::usage, "--slurm-job-expiry: " + slurm_expiry_ms.error().message));
  auto serve = agent::parse_listen(listen);
  if (!serve) return fail("agent", serve.error());
  if (!web_config.empty()) {
    auto wc = agent::load_web_config(web_config);
    if (!wc) return fail("agent", wc.error());
    serve->web = *wc;
  }
  serve->runs_dir = runs_dir;
  std::vector<serving::InferenceEndpointSpec> endpoint_specs;
  for (const auto& text : inference_endpoints) {
    auto spec = serving::parse_inference_endpoint(text);
    if (!spec) return fail("agent", spec.error());
    endpoint_specs.push_back(*spec);
  }
  // The config file's endpoints come after the flags' (same file as the pricing section).
  const std::optional<std::string> config =
      pricing.config_path ? pricing.config_path : meter::default_config_path();
  if (config) {
    if (auto more = serving::load_inference_endpoints(*config); !more)
      return fail("agent", more.error());
    else
      endpoint_specs.insert(endpoint_specs.end(), more->begin(), more->end());
  }
  auto kubelet_every_ms = util::parse_duration_ms(kubelet_pods_every);
  if (!kubelet_every_ms || *kubelet_every_ms < 1000)
    return fail("agent", make_error(ErrorKind::usage, "--kubelet-pods-every '" + kubelet_pods_every +
                                                          "': expected a duration of at least 1s"));
  auto window_ms = util::parse_duration_ms(inference_window);
  if (!window_ms || *window_ms < 1000)
    return fail("agent", make_error(ErrorKind::usage, "--inference-window '" + inference_window +
                                                          "': expected a duration of at least 1s"));
  if (!kubelet_pods_url.empty()) {
    if (!inference_discover)
      return fail("agent", make_error(ErrorKind::usage, "--kubelet-pods-url needs --inference-discover"));
    if (auto u = serving::parse_inference_endpoint(kubelet_pods_url, "--kubelet-pods-url"); !u)
      return fail("agent", u.error());
  }
  // SIGTERM and SIGINT are taken by one thread in sigwait(), so no thread polls for them. They are blocked
  // before NVML starts its call-guard thread, which inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  if (!once) pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto node_guard = make_node_guard(node_flags, *interval_ms, runs_dir);
  if (!node_guard) return fail("agent", node_guard.error());
  auto devices = open_priced_devices(pricing);
  if (!devices) return fail("agent", devices.error());
  auto& backend = devices->backend;
  auto& prices = devices->prices;

  agent::AgentOptions opts;
  opts.interval_ms = *interval_ms;
  opts.max_owners = max_owners;
  opts.state_path = state;
  opts.slurm_job_expiry_ms = *slurm_expiry_ms;
  opts.inference_endpoints = endpoint_specs;
  opts.inference_window_ms = *window_ms;
  opts.proc_root = owner_flags.owners.proc_root;
  opts.inference_discover = inference_discover;
  opts.kubelet_pods_url = kubelet_pods_url;
  opts.kubelet_token_file = kubelet_token_file;
  opts.kubelet_pods_every_ms = *kubelet_every_ms;
  opts.discovery_note = [](const std::string& note) {
    std::fprintf(stderr, "gpumeter agent: note: %s\n", note.c_str());
  };
  sys::OwnerResolver resolver(owner_flags.owners);
  PodResourcesSetup pod_resources(owner_flags.pod_resources_socket, util::system_clock());
  agent::Collector collector(*backend, resolver, util::system_clock(), prices, opts, pod_resources.cache());
  if (auto r = collector.load_state(); !r) return fail("agent", r.error());

  if (once) {
    collector.collect_once();
    util::system_clock().sleep_ns(*interval_ms * 1'000'000);
    collector.collect_once();
    if (*node_guard) (*node_guard)->step(collector);
    const std::string text = agent::exposition_text(collector, runs_dir);
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (!state.empty())
      if (auto r = collector.save_state(); !r) return fail("agent", r.error());
    return util::kExitOk;
  }

  agent::Server server(collector, *serve);
  if (auto r = server.bind(); !r) return fail("agent", r.error());
  std::fprintf(stderr, "gpumeter agent: %zu GPU(s) via %s, serving %s://%s:%d/metrics every %s\n",
               backend->devices().size(), backend->origin().c_str(),
               serve->web && !serve->web->cert_file.empty() ? "https" : "http", serve->host.c_str(),
               server.port(), interval.c_str());
  std::signal(SIGPIPE, SIG_IGN);
  agent::StopSignal stop;
  std::atomic<bool> signalled{false};
  std::thread collect([&] { collector.run(stop); });
  if (*node_guard) (*node_guard)->start(collector, stop);
  std::thread watch([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    signalled.store(true);
    stop.request();
    server.stop();
  });
  server.listen();
  stop.request();
  // listen ended by itself: wake the watcher (SIGTERM is blocked and sigwait()ed there, it ends nothing)
  if (!signalled.load())
    pthread_kill(watch.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
  watch.join();
  collect.join();
  node_guard->reset();  // joins the node guard's loop
  return util::kExitOk;
}

}  // namespace gm::cli
