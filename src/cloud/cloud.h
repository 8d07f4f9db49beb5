#pragma once
// Cloud instance metadata services: preemption and maintenance notices of AWS (IMDSv2 spot instance-action,
// rebalance recommendation), GCP (instance/preempted, instance/maintenance-event) and Azure (Scheduled
// Events), read through the HTTP client seam (util/http_client.h) with strict timeouts, and a
// watcher that polls on a background thread so the job being metered never waits on a metadata service.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/http_client.h"
#include "util/result.h"

namespace gm::cloud {

/// A cloud whose metadata service announces preemption.
enum class CloudProvider { aws, gcp, azure };

/// "aws", "gcp", "azure".
std::string_view provider_name(CloudProvider provider);

/// How `--preemption` was given: a provider, auto-detection, or off.
struct PreemptionMode {
  bool off = false;
  std::optional<CloudProvider> provider;  ///< nullopt with !off: auto (the instance detector decides)
};

/// Parses `--preemption auto|aws|gcp|azure|off`; usage error naming the flag otherwise.
Result<PreemptionMode> parse_preemption_mode(std::string_view text);

/// The cloud this machine runs on, from DMI under `sys_root` (`/sys/class/dmi/id`: sys_vendor "Amazon EC2",
/// product_name "Google Compute Engine", sys_vendor "Microsoft Corporation" with Azure's chassis asset tag);
/// nullopt elsewhere. Reads local files only: never a network call, never a delay.
std::optional<CloudProvider> detect_cloud_provider(const std::string& sys_root = "/sys");

/// The metadata base URL: `flag_url` (--metadata-url), else `env_url` ($GPUMETER_METADATA_URL), else the
/// link-local http://169.254.169.254. Usage error when the URL given is not http://HOST[:PORT].
Result<std::string> metadata_base_url(const std::optional<std::string>& flag_url,
                                      const std::optional<std::string>& env_url);

/// A notice read from a metadata service.
struct CloudNotice {
  CloudProvider provider = CloudProvider::aws;
  bool stop = false;  ///< the machine is being taken (preemption / termination); false: a warning only
  std::string kind;   ///< "terminate", "stop", "hibernate", "preempted", "Preempt", "Terminate", "rebalance",
                      ///< "maintenance", "Reboot", "Redeploy", "Freeze", ...
  std::string id;     ///< what makes it unique (the event id, the action and time) for de-duplication
  std::optional<std::int64_t> deadline_unix_ms;  ///< when the provider takes the machine, if it says
  std::string detail;                            ///< one human sentence
};

// ---- parsers of the providers' documented formats (pure; fuzzed) -------------------------------

/// AWS `spot/instance-action` body: `{"action": "terminate|stop|hibernate", "time": "2017-09-18T08:22:00Z"}`.
Result<CloudNotice> parse_aws_instance_action(std::string_view body);
/// AWS `events/recommendations/rebalance` body: `{"noticeTime": "2020-11-05T08:22:00Z"}` (a warning).
Result<CloudNotice> parse_aws_rebalance(std::string_view body);
/// GCP `instance/preempted`: "TRUE" or "FALSE" (surrounding white space allowed); error otherwise.
Result<bool> parse_gcp_preempted(std::string_view body);
/// GCP `instance/maintenance-event`: "NONE" (nullopt) or an event name such as
/// "TERMINATE_ON_HOST_MAINTENANCE" (a warning).
Result<std::optional<CloudNotice>> parse_gcp_maintenance(std::string_view body);
/// Azure `scheduledevents` JSON: `{"DocumentIncarnation": N, "Events": [{"EventId", "EventType",
/// "ResourceType", "Resources": [...], "EventStatus", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", ...}]}`.
/// Events of type Preempt or Terminate stop, the others warn. With `vm_name`, events whose Resources do not
/// name it are someone else's and are left out.
Result<std::vector<CloudNotice>> parse_azure_scheduled_events(std::string_view body,
                                                              const std::optional<std::string>& vm_name);
/// "2017-09-18T08:22:00Z" (fractional seconds and +hh:mm offsets allowed) in unix ms.
std::optional<std::int64_t> parse_iso8601_ms(std::string_view text);
/// "Mon, 19 Sep 2016 18:29:47 GMT" (RFC 1123) in unix ms.
std::optional<std::int64_t> parse_rfc1123_ms(std::string_view text);
/// Unix ms as "2017-09-18T08:22:00Z".
std::string format_iso8601(std::int64_t unix_ms);

// ---- the HTTP seam ----------------------------------------------------------------------------

/// One request to the metadata service (path relative to the base URL, query included).
struct MetadataRequest {
  std::string method = "GET";  ///< GET or PUT
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// The answer: status and body. Transport failures (refused, timed out) are errors.
struct MetadataResponse {
  int status = 0;
  std::string body;
};

/// Sends requests to one metadata service through the HTTP client seam: connection, read and write each
/// bounded by the timeout, bodies over 64 KiB refused, no redirects, no proxy.
class MetadataClient {
 public:
  /// `http` is shared: a watcher's detached thread may still use it after the watcher is gone.
  MetadataClient(std::string base_url, std::int64_t timeout_ms, std::shared_ptr<util::HttpClient> http);
  /// One bounded exchange: never blocks longer than the timeout.
  Result<MetadataResponse> send(const MetadataRequest& request);

 private:
  std::string base_;
  std::int64_t timeout_ms_;
  std::shared_ptr<util::HttpClient> http_;
};

/// The client for `base_url` over `http` (the process-wide real client when null).
std::unique_ptr<MetadataClient> make_http_metadata_client(const std::string& base_url,
                                                          std::int64_t timeout_ms,
                                                          std::shared_ptr<util::HttpClient> http = nullptr);

// ---- polling ----------------------------------------------------------------------------------

/// One provider's checks, stateful (the IMDSv2 token, Azure's VM name, notices already seen).
class NoticePoller {
 public:
  NoticePoller(CloudProvider provider, MetadataClient& client) : provider_(provider), client_(client) {}
  /// One round of requests; the notices not reported before. An error when the service did not answer or
  /// answered something that is not its documented format (the message names the path).
  Result<std::vector<CloudNotice>> poll(std::int64_t now_unix_ms);
  CloudProvider provider() const { return provider_; }

 private:
  Result<std::vector<CloudNotice>> poll_aws(std::int64_t now_unix_ms);
  Result<std::vector<CloudNotice>> poll_gcp(std::int64_t now_unix_ms);
  Result<std::vector<CloudNotice>> poll_azure();
  std::vector<CloudNotice> only_new(std::vector<CloudNotice> notices);

  CloudProvider provider_;
  MetadataClient& client_;
  std::string aws_token_;
  std::int64_t aws_token_expiry_ms_ = 0;
  std::optional<std::string> azure_vm_name_;
  bool azure_name_tried_ = false;
  std::vector<std::string> seen_;
};

/// What the watcher has seen of the service (for doctor and the report's notes).
struct WatcherHealth {
  std::int64_t polls_ok = 0;
  std::int64_t polls_failed = 0;
  std::string last_error;  ///< "" when the last poll answered
};

/// Polls a metadata service on its own thread every `interval_ms`; the caller only ever takes what has
/// arrived (never blocks). Destroying it never waits for a request in flight (the thread is detached and
/// exits at its next wake).
class NoticeWatcher {
 public:
  /// Starts polling at once. `now_unix_ms` gives wall time to the poller (deadline arithmetic).
  NoticeWatcher(CloudProvider provider, std::unique_ptr<MetadataClient> client, std::int64_t interval_ms,
                std::function<std::int64_t()> now_unix_ms);
  ~NoticeWatcher();
  NoticeWatcher(const NoticeWatcher&) = delete;
  NoticeWatcher& operator=(const NoticeWatcher&) = delete;

  /// The notices that arrived since the last call (non-blocking).
  std::vector<CloudNotice> take();
  /// A descriptor that becomes readable when a notice is waiting (for poll(2)); drained by take().
  int wake_fd() const;
  WatcherHealth health() const;
  CloudProvider provider() const { return provider_; }

 private:
  struct State;
  CloudProvider provider_;
  std::shared_ptr<State> state_;
};

/// Default interval between polls (AWS recommends every 5 s).
inline constexpr std::int64_t kDefaultPreemptionPollMs = 5'000;
/// Bound of one metadata request (link-local services answer in milliseconds).
inline constexpr std::int64_t kMetadataTimeoutMs = 1'000;

}  // namespace gm::cloud
