// The metadata client (over the HTTP client seam, strict timeouts), the per-provider pollers and the
// background watcher.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "cloud/cloud.h"

namespace gm::cloud {
namespace {

constexpr std::size_t kMaxBodyBytes = 64 * 1024;
constexpr const char* kAwsTokenTtlS = "21600";
constexpr std::int64_t kAwsTokenLifeMs = 6 * 3600 * 1000 - 60'000;
/// GCP gives a preempted VM 30 s before it stops it.
constexpr std::int64_t kGcpNoticeMs = 30'000;
/// Notices remembered (an Azure event id changes per event; a bound keeps a misbehaving service harmless).
constexpr std::size_t kMaxSeen = 256;

Error unexpected_status(const std::string& path, int status) {
  return make_error(fmt::format("{}: unexpected HTTP status {}", path, status));
}

}  // namespace

MetadataClient::MetadataClient(std::string base_url, std::int64_t timeout_ms,
                               std::shared_ptr<util::HttpClient> http)
    : base_(std::move(base_url)),
      timeout_ms_(std::max<std::int64_t>(1, timeout_ms)),
      http_(std::move(http)) {}

Result<MetadataResponse> MetadataClient::send(const MetadataRequest& request) {
  util::HttpRequest r;
  r.scheme_host_port = base_;
  r.path = request.path;
  r.headers = request.headers;
  const auto timeout = std::chrono::milliseconds(timeout_ms_);
  r.connect_timeout = r.read_timeout = r.write_timeout = timeout;
  r.follow_redirects = false;
  std::string body;
  bool too_big = false;
  if (request.method == "PUT") {
    r.method = util::HttpMethod::put;
    r.content_type = "text/plain";
  } else {
    r.sink = [&](std::string_view piece) {
      if (body.size() + piece.size() > kMaxBodyBytes) {
        too_big = true;
        return false;
      }
      body.append(piece);
      return true;
    };
  }
  const auto res = http_->send(r);
  if (!res && res.failure() == util::HttpFailure::invalid_url)
    return make_error(ErrorKind::usage, "metadata URL '" + base_ + "' is not valid");
  if (too_big) return make_error(fmt::format("{}: answer larger than {} bytes", request.path, kMaxBodyBytes));
  if (!res)
    return make_error(ErrorKind::unavailable,
                      fmt::format("{}{}: {}", base_, request.path, util::http_failure_text(res.failure())));
  if (r.method == util::HttpMethod::put) body = res->body;
  if (body.size() > kMaxBodyBytes)
    return make_error(fmt::format("{}: answer larger than {} bytes", request.path, kMaxBodyBytes));
  return MetadataResponse{res->status, std::move(body)};
}

std::unique_ptr<MetadataClient> make_http_metadata_client(const std::string& base_url,
                                                          std::int64_t timeout_ms,
                                                          std::shared_ptr<util::HttpClient> http) {
  // Without a client: the process-wide real one, which lives as long as the process (not owned).
  if (!http) http = std::shared_ptr<util::HttpClient>(std::shared_ptr<void>(), &util::system_http());
  return std::make_unique<MetadataClient>(base_url, timeout_ms, std::move(http));
}

std::vector<CloudNotice> NoticePoller::only_new(std::vector<CloudNotice> notices) {
  std::vector<CloudNotice> out;
  for (auto& n : notices) {
    if (std::find(seen_.begin(), seen_.end(), n.id) != seen_.end()) continue;
    if (seen_.size() >= kMaxSeen) seen_.erase(seen_.begin());
    seen_.push_back(n.id);
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<CloudNotice>> NoticePoller::poll(std::int64_t now_unix_ms) {
  switch (provider_) {
    case CloudProvider::aws:
      return poll_aws(now_unix_ms);
    case CloudProvider::gcp:
      return poll_gcp(now_unix_ms);
    case CloudProvider::azure:
      return poll_azure();
  }
  return std::vector<CloudNotice>{};
}

Result<std::vector<CloudNotice>> NoticePoller::poll_aws(std::int64_t now_unix_ms) {
  if (aws_token_.empty() || now_unix_ms >= aws_token_expiry_ms_) {
    MetadataRequest put{
        "PUT", "/latest/api/token", {{"X-aws-ec2-metadata-token-ttl-seconds", kAwsTokenTtlS}}};
    GM_TRY(auto r, client_.send(put));
    if (r.status != 200) return unexpected_status(put.path, r.status);
    std::string token(r.body);
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (token.empty() || token.size() > 1024 ||
        std::any_of(token.begin(), token.end(), [](char c) { return c < 0x21 || c > 0x7e; }))
      return make_error("/latest/api/token: the answer is not an IMDSv2 token");
    aws_token_ = token;
    aws_token_expiry_ms_ = now_unix_ms + kAwsTokenLifeMs;
  }
  const std::vector<std::pair<std::string, std::string>> auth{{"X-aws-ec2-metadata-token", aws_token_}};
  std::vector<CloudNotice> found;
  const MetadataRequest action{"GET", "/latest/meta-data/spot/instance-action", auth};
  GM_TRY(auto a, client_.send(action));
  if (a.status == 401) {  // the token expired or was revoked: a new one next time
    aws_token_.clear();
    return unexpected_status(action.path, a.status);
  }
  if (a.status == 200) {
    GM_TRY(auto n, parse_aws_instance_action(a.body));
    found.push_back(std::move(n));
  } else if (a.status != 404) {
    return unexpected_status(action.path, a.status);
  }
  const MetadataRequest rebalance{"GET", "/latest/meta-data/events/recommendations/rebalance", auth};
  GM_TRY(auto b, client_.send(rebalance));
  if (b.status == 200) {
    GM_TRY(auto n, parse_aws_rebalance(b.body));
    found.push_back(std::move(n));
  } else if (b.status != 404) {
    return unexpected_status(rebalance.path, b.status);
  }
  return only_new(std::move(found));
}

Result<std::vector<CloudNotice>> NoticePoller::poll_gcp(std::int64_t now_unix_ms) {
  const std::vector<std::pair<std::string, std::string>> flavor{{"Metadata-Flavor", "Google"}};
  std::vector<CloudNotice> found;
  const MetadataRequest preempted{"GET", "/computeMetadata/v1/instance/preempted", flavor};
  GM_TRY(auto p, client_.send(preempted));
  if (p.status != 200) return unexpected_status(preempted.path, p.status);
  GM_TRY(bool is_preempted, parse_gcp_preempted(p.body));
  if (is_preempted) {
    CloudNotice n;
    n.provider = CloudProvider::gcp;
    n.stop = true;
    n.kind = "preempted";
    n.id = "preempted";
    n.deadline_unix_ms = now_unix_ms + kGcpNoticeMs;
    n.detail = "GCP preemption notice (instance/preempted is TRUE): the VM stops within 30 s";
    found.push_back(std::move(n));
  }
  const MetadataRequest maintenance{"GET", "/computeMetadata/v1/instance/maintenance-event", flavor};
  GM_TRY(auto m, client_.send(maintenance));
  if (m.status == 200) {
    GM_TRY(auto n, parse_gcp_maintenance(m.body));
    if (n) found.push_back(std::move(*n));
  } else if (m.status != 404) {
    return unexpected_status(maintenance.path, m.status);
  }
  return only_new(std::move(found));
}

Result<std::vector<CloudNotice>> NoticePoller::poll_azure() {
  const std::vector<std::pair<std::string, std::string>> md{{"Metadata", "true"}};
  if (!azure_name_tried_) {
    // The VM's own name tells its events from its scale set neighbours'; without it every event counts.
    azure_name_tried_ = true;
    auto r = client_.send({"GET", "/metadata/instance/compute/name?api-version=2021-02-01&format=text", md});
    if (r && r->status == 200 && !r->body.empty() && r->body.size() < 256) azure_vm_name_ = r->body;
  }
  const MetadataRequest events{"GET", "/metadata/scheduledevents?api-version=2020-07-01", md};
  GM_TRY(auto e, client_.send(events));
  if (e.status != 200) return unexpected_status("/metadata/scheduledevents", e.status);
  GM_TRY(auto notices, parse_azure_scheduled_events(e.body, azure_vm_name_));
  return only_new(std::move(notices));
}

// ---- the watcher ------------------------------------------------------------------------------

struct NoticeWatcher::State {
  State(CloudProvider provider, std::unique_ptr<MetadataClient> c)
      : client(std::move(c)), poller(provider, *client) {}
  ~State() {
    if (pipe_fds[0] >= 0) close(pipe_fds[0]);
    if (pipe_fds[1] >= 0) close(pipe_fds[1]);
  }
  std::unique_ptr<MetadataClient> client;
  NoticePoller poller;
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::deque<CloudNotice> pending;
  WatcherHealth health;
  int pipe_fds[2] = {-1, -1};
};

NoticeWatcher::NoticeWatcher(CloudProvider provider, std::unique_ptr<MetadataClient> client,
                             std::int64_t interval_ms, std::function<std::int64_t()> now_unix_ms)
    : provider_(provider), state_(std::make_shared<State>(provider, std::move(client))) {
  if (pipe2(state_->pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) state_->pipe_fds[0] = state_->pipe_fds[1] = -1;
  interval_ms = std::max<std::int64_t>(10, interval_ms);
  std::thread([state = state_, interval_ms, now = std::move(now_unix_ms)] {
    std::unique_lock<std::mutex> lock(state->mutex);
    while (!state->stop) {
      const std::int64_t t = now();  // under the lock: never called once the watcher is gone
      lock.unlock();
      auto r = state->poller.poll(t);
      lock.lock();
      if (state->stop) break;
      if (r) {
        ++state->health.polls_ok;
        state->health.last_error.clear();
        for (auto& n : *r) state->pending.push_back(std::move(n));
        if (!r->empty() && state->pipe_fds[1] >= 0) {
          const char b = 1;
          ssize_t ignored = write(state->pipe_fds[1], &b, 1);
          (void)ignored;
        }
      } else {
        ++state->health.polls_failed;
        state->health.last_error = r.error().message;
      }
      state->wake.wait_for(lock, std::chrono::milliseconds(interval_ms), [&] { return state->stop; });
    }
  }).detach();
}

NoticeWatcher::~NoticeWatcher() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->wake.notify_all();
}

std::vector<CloudNotice> NoticeWatcher::take() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->pipe_fds[0] >= 0) {
    char buf[64];
    while (read(state_->pipe_fds[0], buf, sizeof buf) > 0) {
    }
  }
  std::vector<CloudNotice> out(std::make_move_iterator(state_->pending.begin()),
                               std::make_move_iterator(state_->pending.end()));
  state_->pending.clear();
  return out;
}

int NoticeWatcher::wake_fd() const {
  return state_->pipe_fds[0];
}

WatcherHealth NoticeWatcher::health() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->health;
}

}  // namespace gm::cloud
