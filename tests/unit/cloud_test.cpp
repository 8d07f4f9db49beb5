// The metadata services' documented answers (AWS IMDSv2 spot/instance-action and rebalance, GCP
// instance/preempted and maintenance-event, Azure Scheduled Events), the pollers over a fake client, the
// background watcher, the provider detection from DMI and the base URL.
#include "cloud/cloud.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/fake_http.h"

namespace gm {
namespace {

TEST(CloudParseTest, AwsInstanceActionAsDocumented) {
  auto n = cloud::parse_aws_instance_action(R"({"action": "terminate", "time": "2017-09-18T08:22:00Z"})");
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_TRUE(n->stop);
  EXPECT_EQ(n->kind, "terminate");
  EXPECT_EQ(n->provider, cloud::CloudProvider::aws);
  ASSERT_TRUE(n->deadline_unix_ms);
  EXPECT_EQ(*n->deadline_unix_ms, 1505722920000);
  EXPECT_EQ(cloud::format_iso8601(*n->deadline_unix_ms), "2017-09-18T08:22:00Z");
  EXPECT_TRUE(cloud::parse_aws_instance_action(R"({"action":"hibernate","time":"2017-09-18T08:22:00Z"})"));
  EXPECT_FALSE(cloud::parse_aws_instance_action(R"({"action":"explode","time":"2017-09-18T08:22:00Z"})"));
  EXPECT_FALSE(cloud::parse_aws_instance_action(R"({"action":"stop"})"));
  EXPECT_FALSE(cloud::parse_aws_instance_action(R"({"action":"stop","time":"yesterday"})"));
  EXPECT_FALSE(cloud::parse_aws_instance_action("<html>404</html>"));
  EXPECT_FALSE(cloud::parse_aws_instance_action("[]"));
}

TEST(CloudParseTest, AwsRebalanceIsAWarning) {
  auto n = cloud::parse_aws_rebalance(R"({"noticeTime": "2020-11-05T08:22:00Z"})");
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_FALSE(n->stop);
  EXPECT_EQ(n->kind, "rebalance");
  EXPECT_FALSE(cloud::parse_aws_rebalance(R"({"time": "2020-11-05T08:22:00Z"})"));
}

TEST(CloudParseTest, GcpPreemptedAndMaintenance) {
  EXPECT_TRUE(*cloud::parse_gcp_preempted("TRUE"));
  EXPECT_FALSE(*cloud::parse_gcp_preempted("FALSE\n"));
  EXPECT_FALSE(cloud::parse_gcp_preempted("true"));
  EXPECT_FALSE(cloud::parse_gcp_preempted(""));
  auto none = cloud::parse_gcp_maintenance("NONE");
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  auto m = cloud::parse_gcp_maintenance("TERMINATE_ON_HOST_MAINTENANCE");
  ASSERT_TRUE(m && *m);
  EXPECT_FALSE((*m)->stop);
  EXPECT_FALSE(cloud::parse_gcp_maintenance("{\"x\":1}"));
}

TEST(CloudParseTest, AzureScheduledEventsPreemptStopsOthersWarnOthersVmsIgnored) {
  const std::string body = R"({"DocumentIncarnation": 3, "Events": [
    {"EventId": "A1", "EventType": "Reboot", "ResourceType": "VirtualMachine", "Resources": ["vm1"],
     "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "",
     "EventSource": "Platform", "DurationInSeconds": -1},
    {"EventId": "B2", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["vm1"],
     "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:30:17 GMT"},
    {"EventId": "C3", "EventType": "Terminate", "ResourceType": "VirtualMachine", "Resources": ["vm2"],
     "EventStatus": "Scheduled", "NotBefore": ""}]})";
  auto all = cloud::parse_azure_scheduled_events(body, std::nullopt);
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->size(), 3u);
  EXPECT_FALSE((*all)[0].stop);
  EXPECT_TRUE((*all)[1].stop);
  ASSERT_TRUE((*all)[1].deadline_unix_ms);
  EXPECT_EQ(cloud::format_iso8601(*(*all)[1].deadline_unix_ms), "2016-09-19T18:30:17Z");
  EXPECT_TRUE((*all)[2].stop);
  EXPECT_FALSE((*all)[2].deadline_unix_ms);
  auto mine = cloud::parse_azure_scheduled_events(body, std::string("vm1"));
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->size(), 2u) << "vm2's Terminate is another VM's";
  EXPECT_TRUE(cloud::parse_azure_scheduled_events(R"({"DocumentIncarnation": 0, "Events": []})", std::nullopt)
                  ->empty());
  EXPECT_FALSE(
      cloud::parse_azure_scheduled_events(R"({"Events": [{"EventType": "Preempt"}]})", std::nullopt));
  EXPECT_FALSE(cloud::parse_azure_scheduled_events("garbage", std::nullopt));
}

TEST(CloudParseTest, TimesAndModesAndUrls) {
  EXPECT_EQ(*cloud::parse_iso8601_ms("2017-09-18T08:22:00.5Z"), 1505722920500);
  EXPECT_EQ(*cloud::parse_iso8601_ms("2017-09-18T10:22:00+02:00"), 1505722920000);
  EXPECT_FALSE(cloud::parse_iso8601_ms("2017-09-18T08:22:00"));
  EXPECT_FALSE(cloud::parse_iso8601_ms("2017-13-18T08:22:00Z"));
  EXPECT_FALSE(cloud::parse_rfc1123_ms("Mon, 19 Foo 2016 18:29:47 GMT"));
  EXPECT_TRUE(cloud::parse_preemption_mode("auto")->provider == std::nullopt);
  EXPECT_TRUE(cloud::parse_preemption_mode("off")->off);
  EXPECT_EQ(*cloud::parse_preemption_mode("gcp")->provider, cloud::CloudProvider::gcp);
  auto bad = cloud::parse_preemption_mode("oracle");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, ErrorKind::usage);
  EXPECT_NE(bad.error().message.find("--preemption"), std::string::npos);
  EXPECT_EQ(*cloud::metadata_base_url(std::nullopt, std::nullopt), "http://169.254.169.254");
  EXPECT_EQ(*cloud::metadata_base_url(std::nullopt, std::string("http://127.0.0.1:9/")),
            "http://127.0.0.1:9");
  EXPECT_EQ(*cloud::metadata_base_url(std::string("http://a:1"), std::string("http://b:2")), "http://a:1");
  auto https = cloud::metadata_base_url(std::string("https://x"), std::nullopt);
  ASSERT_FALSE(https);
  EXPECT_NE(https.error().message.find("--metadata-url"), std::string::npos);
  auto env = cloud::metadata_base_url(std::nullopt, std::string("http://h/latest"));
  ASSERT_FALSE(env);
  EXPECT_NE(env.error().message.find("GPUMETER_METADATA_URL"), std::string::npos);
}

TEST(CloudDetectTest, DmiSaysWhichCloudWithoutTheNetwork) {
  const auto root = std::filesystem::temp_directory_path() / ("gm_dmi_" + std::to_string(getpid()));
  const auto dir = root / "class/dmi/id";
  std::filesystem::create_directories(dir);
  auto write = [&](const char* name, const char* text) { std::ofstream(dir / name) << text << "\n"; };
  EXPECT_FALSE(cloud::detect_cloud_provider(root.string()));
  write("sys_vendor", "Amazon EC2");
  EXPECT_EQ(cloud::detect_cloud_provider(root.string()), cloud::CloudProvider::aws);
  write("sys_vendor", "Google");
  write("product_name", "Google Compute Engine");
  EXPECT_EQ(cloud::detect_cloud_provider(root.string()), cloud::CloudProvider::gcp);
  write("sys_vendor", "Microsoft Corporation");
  write("product_name", "Virtual Machine");
  EXPECT_FALSE(cloud::detect_cloud_provider(root.string())) << "Hyper-V on premises is not Azure";
  write("chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77");
  EXPECT_EQ(cloud::detect_cloud_provider(root.string()), cloud::CloudProvider::azure);
  std::filesystem::remove_all(root);
}

/// A metadata client for tests: the real MetadataClient over the fake HTTP client.
std::unique_ptr<cloud::MetadataClient> metadata_over(std::shared_ptr<test::FakeHttpClient> http) {
  return cloud::make_http_metadata_client("http://169.254.169.254", cloud::kMetadataTimeoutMs,
                                          std::move(http));
}

/// An AWS IMDSv2 stand-in over the fake client: a token is required, 404 until `notice` is set.
struct FakeImds {
  std::string notice, rebalance;
  int token_puts = 0;
  std::vector<std::string> paths;
  util::HttpResult operator()(const util::HttpRequest& r) {
    const bool put = r.method == util::HttpMethod::put;
    paths.push_back((put ? "PUT " : "GET ") + r.path);
    if (put && r.path == "/latest/api/token") {
      ++token_puts;
      return test::http_ok("TOKEN-1");
    }
    bool authed = false;
    for (const auto& [k, v] : r.headers)
      authed = authed || (k == "X-aws-ec2-metadata-token" && v == "TOKEN-1");
    if (!authed) return test::http_answer(401);
    if (r.path == "/latest/meta-data/spot/instance-action")
      return notice.empty() ? test::http_answer(404, "Not Found") : test::http_ok(notice);
    if (r.path == "/latest/meta-data/events/recommendations/rebalance")
      return rebalance.empty() ? test::http_answer(404) : test::http_ok(rebalance);
    return test::http_answer(404);
  }
};

TEST(NoticePollerTest, AwsTokenOnceThenNoticesOnceEach) {
  FakeImds imds;
  auto client = metadata_over(
      std::make_shared<test::FakeHttpClient>([&](const util::HttpRequest& r) { return imds(r); }));
  cloud::NoticePoller poller(cloud::CloudProvider::aws, *client);
  auto r = poller.poll(1'000);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->empty());
  imds.rebalance = R"({"noticeTime": "2020-11-05T08:22:00Z"})";
  r = poller.poll(2'000);
  ASSERT_TRUE(r && r->size() == 1u);
  EXPECT_FALSE((*r)[0].stop);
  imds.notice = R"({"action": "stop", "time": "2020-11-05T08:24:00Z"})";
  r = poller.poll(3'000);
  ASSERT_TRUE(r && r->size() == 1u);
  EXPECT_TRUE((*r)[0].stop);
  EXPECT_TRUE(poller.poll(4'000)->empty()) << "a notice is reported once";
  EXPECT_EQ(imds.token_puts, 1);
}

TEST(NoticePollerTest, GcpFlavorHeaderAndThirtySecondDeadline) {
  bool preempted = false;
  auto client = metadata_over(
      std::make_shared<test::FakeHttpClient>([&](const util::HttpRequest& r) -> util::HttpResult {
        bool flavor = false;
        for (const auto& [k, v] : r.headers) flavor = flavor || (k == "Metadata-Flavor" && v == "Google");
        if (!flavor) return test::http_answer(403);
        if (r.path == "/computeMetadata/v1/instance/preempted")
          return test::http_ok(preempted ? "TRUE" : "FALSE");
        if (r.path == "/computeMetadata/v1/instance/maintenance-event") return test::http_ok("NONE");
        return test::http_answer(404);
      }));
  cloud::NoticePoller poller(cloud::CloudProvider::gcp, *client);
  EXPECT_TRUE(poller.poll(1'000)->empty());
  preempted = true;
  auto r = poller.poll(5'000);
  ASSERT_TRUE(r && r->size() == 1u);
  EXPECT_TRUE((*r)[0].stop);
  EXPECT_EQ(*(*r)[0].deadline_unix_ms, 35'000);
}

TEST(NoticePollerTest, GarbageAndTransportErrorsAreErrorsNotNotices) {
  auto garbage = metadata_over(std::make_shared<test::FakeHttpClient>(
      [](const util::HttpRequest&) { return test::http_ok("\x01\x02 not json"); }));
  for (auto p : {cloud::CloudProvider::aws, cloud::CloudProvider::gcp, cloud::CloudProvider::azure}) {
    cloud::NoticePoller poller(p, *garbage);
    auto r = poller.poll(0);
    EXPECT_FALSE(r) << cloud::provider_name(p);
  }
  auto down = metadata_over(std::make_shared<test::FakeHttpClient>(
      [](const util::HttpRequest&) -> util::HttpResult { return util::HttpFailure::connection; }));
  cloud::NoticePoller poller(cloud::CloudProvider::azure, *down);
  EXPECT_FALSE(poller.poll(0));
}

TEST(NoticeWatcherTest, DeliversThroughTheWakeDescriptorAndNeverBlocksTheCaller) {
  // Shared with the watcher's detached thread, which may outlive this test by one exchange.
  auto hang = std::make_shared<std::atomic<bool>>(true);
  auto client = metadata_over(
      std::make_shared<test::FakeHttpClient>([hang](const util::HttpRequest& r) -> util::HttpResult {
        // The first exchange hangs (a metadata service that accepts and never answers, until the test lets
        // go).
        while (hang->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (r.path == "/metadata/scheduledevents?api-version=2020-07-01")
          return test::http_ok(R"({"DocumentIncarnation":1,"Events":[{"EventId":"E","EventType":"Preempt",
        "Resources":[],"EventStatus":"Scheduled","NotBefore":"Mon, 19 Sep 2016 18:30:17 GMT"}]})");
        return test::http_answer(404);
      }));
  cloud::NoticeWatcher watcher(cloud::CloudProvider::azure, std::move(client), 20,
                               [] { return std::int64_t{0}; });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(watcher.take().empty());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100)) << "take() never waits";
  *hang = false;
  pollfd p{watcher.wake_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10'000), 1);
  auto notices = watcher.take();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_TRUE(notices[0].stop);
  EXPECT_GE(watcher.health().polls_ok, 1);
}

}  // namespace
}  // namespace gm
