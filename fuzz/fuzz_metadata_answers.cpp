// libFuzzer target: the cloud metadata services' answers (AWS spot/instance-action and rebalance, GCP
// preempted and maintenance-event, Azure scheduledevents) and the time formats in them, also through a
// poller whose fake service answers every request with the input. Any bytes: an error or a notice whose
// fields hold what the format allows; never a crash.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cloud/cloud.h"
#include "fuzz_util.h"
#include "support/fake_http.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto n = gm::cloud::parse_aws_instance_action(text)) {
    check(n->stop && n->deadline_unix_ms.has_value());
    check(n->kind == "terminate" || n->kind == "stop" || n->kind == "hibernate");
  }
  if (auto n = gm::cloud::parse_aws_rebalance(text)) check(!n->stop);
  (void)gm::cloud::parse_gcp_preempted(text);
  if (auto m = gm::cloud::parse_gcp_maintenance(text); m && *m) check(!(*m)->stop);
  for (const auto& vm : {std::optional<std::string>(), std::optional<std::string>("vm1")})
    if (auto events = gm::cloud::parse_azure_scheduled_events(text, vm))
      for (const auto& e : *events) check(e.stop == (e.kind == "Preempt" || e.kind == "Terminate"));
  if (auto t = gm::cloud::parse_iso8601_ms(text)) (void)gm::cloud::format_iso8601(*t);
  (void)gm::cloud::parse_rfc1123_ms(text);
  (void)gm::cloud::parse_preemption_mode(text);
  (void)gm::cloud::metadata_base_url(std::string(text), std::nullopt);
  for (auto p :
       {gm::cloud::CloudProvider::aws, gm::cloud::CloudProvider::gcp, gm::cloud::CloudProvider::azure}) {
    auto client = gm::cloud::make_http_metadata_client(
        "http://169.254.169.254", gm::cloud::kMetadataTimeoutMs,
        std::make_shared<gm::test::FakeHttpClient>(
            [&](const gm::util::HttpRequest&) { return gm::test::http_ok(std::string(text)); }));
    gm::cloud::NoticePoller poller(p, *client);
    (void)poller.poll(1'700'000'000'000);
  }
  return 0;
}
