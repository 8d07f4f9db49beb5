// The engine metrics of the server a run wraps (`gpumeter run --inference-endpoint URL|auto`): scraped on a
// background thread every sample interval, so the driver never waits on the network. With "auto", the ports
// the job listens on are found in /proc and probed once each for a known engine's /metrics.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "serving/serving.h"

namespace gm::serving {
namespace {

class EngineInferenceSource final : public InferenceSource {
 public:
  EngineInferenceSource(std::optional<InferenceEndpointSpec> spec, std::int64_t interval_ms)
      : spec_(std::move(spec)),
        interval_ms_(std::max<std::int64_t>(interval_ms, 100)),
        timeout_ms_(std::clamp<std::int64_t>(interval_ms, 100, 2000)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~EngineInferenceSource() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  EngineInferenceSource(const EngineInferenceSource&) = delete;
  EngineInferenceSource& operator=(const EngineInferenceSource&) = delete;

  std::optional<InferenceScrape> take(const std::set<std::uint32_t>& job_pids) override {
    std::lock_guard lock(mu_);
    pids_ = job_pids;
    std::optional<InferenceScrape> out = std::move(latest_);
    latest_.reset();
    return out;
  }

 private:
  void loop() {
    std::set<std::uint16_t> probed;
    auto forget_at = std::chrono::steady_clock::now() + kReprobe;
    std::unique_lock lock(mu_);
    while (!stop_) {
      // A server may listen before it serves its metrics: until one is found, ports are asked again now and
      // then.
      if (!spec_ && std::chrono::steady_clock::now() >= forget_at) {
        probed.clear();
        forget_at = std::chrono::steady_clock::now() + kReprobe;
      }
      std::optional<InferenceEndpointSpec> spec = spec_;
      const std::set<std::uint32_t> pids = pids_;
      lock.unlock();
      InferenceScrape scrape;
      if (!spec) {
        // Discovery: each port of the job's is probed once (a port that answered garbage is not asked again).
        std::vector<std::uint16_t> fresh;
        for (std::uint16_t port : listening_ports("/proc", pids))
          if (probed.insert(port).second) fresh.push_back(port);
        ProbeResult probe = probe_engine_ports("127.0.0.1", fresh, timeout_ms_);
        // A port that said why it serves no metrics (SGLang without --enable-metrics) is the likely server.
        if (!probe.notes.empty()) why_not_ = probe.notes.front();
        spec = std::move(probe.found);
        if (!spec)
          scrape.error = why_not_.empty()
                             ? "no port the job listens on serves a known engine's /metrics (yet)"
                             : why_not_;
      }
      if (spec) {
        ScrapeOutcome o = scrape_endpoint(*spec, timeout_ms_);
        scrape.endpoint = spec->display;
        if (o.reading) {
          scrape.reading = std::move(o.reading);
        } else {
          scrape.error = o.error + (o.detail.empty() ? "" : ": " + o.detail);
        }
      }
      lock.lock();
      if (spec && !spec_) spec_ = spec;
      latest_ = std::move(scrape);
      cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stop_; });
    }
  }

  static constexpr std::chrono::seconds kReprobe{10};
  std::string why_not_;  // what a probed port said about serving no metrics (discovery thread only)
  std::optional<InferenceEndpointSpec> spec_;
  const std::int64_t interval_ms_;
  const std::int64_t timeout_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<std::uint32_t> pids_;
  std::optional<InferenceScrape> latest_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<InferenceSource>> make_engine_inference_source(const std::string& url,
                                                                      std::int64_t interval_ms) {
  std::optional<InferenceEndpointSpec> spec;
  if (url != "auto") {
    GM_TRY(auto parsed, parse_inference_endpoint(url));
    if (!parsed.owner.empty())
      return make_error(ErrorKind::usage,
                        "--inference-endpoint '" + url +
                            "': owner= is for the agent; under gpumeter run the server is the job");
    spec = std::move(parsed);
  }
  return std::unique_ptr<InferenceSource>(
      std::make_unique<EngineInferenceSource>(std::move(spec), interval_ms));
}

}  // namespace gm::serving
