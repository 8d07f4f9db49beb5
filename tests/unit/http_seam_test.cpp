// The HTTP client seam (util/http_client.h): the real client against a local server (methods, query encoding,
// headers, timeouts, failures named as before), and every caller over the one fake
// (tests/support/fake_http.h): what each sends (method, URL, headers, timeouts, TLS) and the words it gives
// for each failure.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <thread>

#include "agent/node_guard.h"
#include "cloud/cloud.h"
#include "guard/guard.h"
#include "prices/prices.h"
#include "report/fleet.h"
#include "serving/serving.h"
#include "support/fake_http.h"
#include "util/http_client.h"
#include "util/money.h"

namespace gm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test::FakeHttpClient;
using util::HttpFailure;
using util::HttpMethod;
using util::HttpRequest;

/// A local test server on a free port, stopped and joined on destruction.
class LocalServer {
 public:
  explicit LocalServer(const std::function<void(httplib::Server&)>& routes) {
    routes(server_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(milliseconds(5));
  }
  ~LocalServer() {
    server_.stop();
    thread_.join();
  }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// ---- the real client -----------------------------------------------------------------------------

TEST(HttpClientTest, RealClientSendsMethodsParamsHeadersAndBodies) {
  LocalServer srv([](httplib::Server& s) {
    s.Get("/q", [](const httplib::Request& req, httplib::Response& res) {
      res.set_header("X-Seen", req.get_header_value("X-Test"));
      res.set_content("query=" + req.get_param_value("query"), "text/plain");
    });
    s.Post("/hook", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 202;
      res.set_content(req.get_header_value("Content-Type") + " " + req.body, "text/plain");
    });
    s.Put("/token", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("put " + req.get_header_value("X-Ttl"), "text/plain");
    });
  });
  util::SystemHttpClient http;
  util::HttpRequest get;
  get.scheme_host_port = srv.base();
  get.path = "/q";
  get.params = {{"query", "sum(increase(x[3600s])) & y"}};
  get.headers = {{"X-Test", "v1"}};
  auto r = http.send(get);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "query=sum(increase(x[3600s])) & y") << "parameters are URL-encoded on the way";
  bool seen = false;
  for (const auto& [k, v] : r->headers) seen = seen || (k == "X-Seen" && v == "v1");
  EXPECT_TRUE(seen);

  util::HttpRequest post;
  post.method = util::HttpMethod::post;
  post.scheme_host_port = srv.base();
  post.path = "/hook";
  post.body = R"({"a":1})";
  post.content_type = "application/json";
  r = http.send(post);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(r->body, R"(application/json {"a":1})");

  util::HttpRequest put;
  put.method = util::HttpMethod::put;
  put.scheme_host_port = srv.base();
  put.path = "/token";
  put.headers = {{"X-Ttl", "21600"}};
  put.content_type = "text/plain";
  r = http.send(put);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "put 21600");

  get.path = "/missing";
  r = http.send(get);
  ASSERT_TRUE(r.ok()) << "a 404 is an answer";
  EXPECT_EQ(r->status, 404);
}

TEST(HttpClientTest, RealClientStreamsToTheSinkAndStops) {
  LocalServer srv([](httplib::Server& s) {
    s.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(100'000, 'x'), "text/plain");
    });
    s.Get("/gone", [](const httplib::Request&, httplib::Response& res) {
      res.status = 503;
      res.set_content("down", "text/plain");
    });
  });
  util::SystemHttpClient http;
  util::HttpRequest get;
  get.scheme_host_port = srv.base();
  get.path = "/big";
  std::size_t got = 0;
  get.sink = [&](std::string_view piece) {
    got += piece.size();
    return true;
  };
  auto r = http.send(get);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(got, 100'000u);
  EXPECT_TRUE(r->body.empty()) << "the sink had the body";
  get.sink = [](std::string_view) { return false; };
  r = http.send(get);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure(), util::HttpFailure::canceled);
  int status = 0;
  get.path = "/gone";
  get.sink = [](std::string_view) { return true; };
  get.on_status = [&](int s) {
    status = s;
    return s == 200;
  };
  r = http.send(get);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(status, 503);
  EXPECT_EQ(r.failure(), util::HttpFailure::canceled);
}

TEST(HttpClientTest, RealClientFailuresAreNamedAsCppHttplibNamesThem) {
  LocalServer srv([](httplib::Server& s) {
    s.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(milliseconds(600));
      res.set_content("late", "text/plain");
    });
  });
  util::SystemHttpClient http;
  util::HttpRequest get;
  get.scheme_host_port = srv.base();
  get.path = "/slow";
  get.read_timeout = milliseconds(100);
  auto r = http.send(get);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure(), util::HttpFailure::read);
  EXPECT_EQ(util::http_failure_name(r.failure()), "Read");
  EXPECT_EQ(util::http_failure_text(r.failure()),
            "the connection broke while reading the answer (or it timed out)");

  get.scheme_host_port = "http://127.0.0.1:1";  // nothing listens on port 1
  r = http.send(get);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure(), util::HttpFailure::connection);
  EXPECT_EQ(util::http_failure_text(r.failure()),
            "cannot connect (nothing listening, or the host is unreachable)");
  EXPECT_EQ(util::http_failure_name(r.failure()), "Connection");

  get.scheme_host_port = "ftp://127.0.0.1:1";
  r = http.send(get);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure(), util::HttpFailure::invalid_url);
}

TEST(HttpClientTest, FailureWordsAndNames) {
  EXPECT_EQ(util::http_failure_text(util::HttpFailure::connection_timeout), "connection timed out");
  EXPECT_EQ(util::http_failure_text(util::HttpFailure::ssl_server_verification),
            "the server's TLS certificate could not be verified");
  EXPECT_EQ(util::http_failure_text(util::HttpFailure::canceled), "request cancelled");
  EXPECT_EQ(util::http_failure_text(util::HttpFailure::compression), "request failed (Compression)");
  EXPECT_EQ(util::http_failure_name(util::HttpFailure::connection_timeout), "ConnectionTimeout");
  EXPECT_EQ(util::http_failure_name(util::HttpFailure::ssl_connection), "SSLConnection");
  util::HttpRequest r;
  r.scheme_host_port = "http://h:9090";
  r.path = "/api/v1/query";
  r.params = {{"query", "up"}, {"time", "1"}};
  EXPECT_EQ(r.url(), "http://h:9090/api/v1/query?query=up&time=1");
}

// ---- the fake ------------------------------------------------------------------------------------

TEST(HttpFakeTest, CannedAnswersFailuresAndRecordedRequests) {
  FakeHttpClient fake;
  fake.answer("http://a/x", 200, "hello");
  fake.fail("http://a/slow", util::HttpFailure::read);
  util::HttpRequest r;
  r.scheme_host_port = "http://a";
  r.path = "/x";
  auto res = fake.send(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->body, "hello");
  r.path = "/slow";
  EXPECT_EQ(fake.send(r).failure(), util::HttpFailure::read);
  r.path = "/nobody";
  EXPECT_EQ(fake.send(r).failure(), util::HttpFailure::connection) << "an unknown URL is refused";
  std::string streamed;
  r.path = "/x";
  r.sink = [&](std::string_view piece) {
    streamed += piece;
    return true;
  };
  res = fake.send(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(streamed, "hello");
  EXPECT_TRUE(res->body.empty());
  r.sink = [](std::string_view) { return false; };
  EXPECT_EQ(fake.send(r).failure(), util::HttpFailure::canceled);
  EXPECT_EQ(fake.urls(), (std::vector<std::string>{"http://a/x", "http://a/slow", "http://a/nobody",
                                                   "http://a/x", "http://a/x"}));
}

// ---- every caller over the fake ------------------------------------------------------------------

TEST(HttpSeamTest, PricesGetterFollowsRedirectsVerifiesTlsAndRedactsTheKey) {
  FakeHttpClient fake;
  prices::HttpGetter getter(fake);
  const std::string url = "https://prices.example/v1/skus?key=SECRET&page=2";
  fake.answer(url, 200, "[1,2,3]");
  std::string body;
  auto ok = getter.get(url, {{"Accept", "application/json"}}, [&](std::string_view p) {
    body += p;
    return true;
  });
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(body, "[1,2,3]");
  const util::HttpRequest sent = fake.requests().at(0);
  EXPECT_EQ(sent.method, util::HttpMethod::get);
  EXPECT_EQ(sent.scheme_host_port, "https://prices.example");
  EXPECT_EQ(sent.path, "/v1/skus?key=SECRET&page=2");
  EXPECT_TRUE(sent.follow_redirects);
  EXPECT_TRUE(sent.verify_server_certificate);
  EXPECT_EQ(sent.connect_timeout, milliseconds(10'000));
  EXPECT_EQ(sent.read_timeout, milliseconds(60'000));
  EXPECT_EQ(sent.headers, (util::HttpFields{{"Accept", "application/json"}}));

  auto sink = [](std::string_view) { return true; };
  fake.answer(url, 503, "busy");
  auto status = getter.get(url, {}, sink);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().kind, ErrorKind::unavailable);
  EXPECT_EQ(status.error().message, "https://prices.example/v1/skus?key=…&page=2: HTTP status 503");
  fake.fail(url, util::HttpFailure::read);
  EXPECT_EQ(
      getter.get(url, {}, sink).error().message,
      "https://prices.example/v1/skus?key=…&page=2: the connection broke while reading the answer (or it "
      "timed out)");
  fake.answer(url, 200, "far too long");
  EXPECT_EQ(getter.get(url, {}, [](std::string_view) { return false; }).error().message,
            "https://prices.example/v1/skus?key=…&page=2: the answer was too large");
  EXPECT_EQ(getter.get("ftp://x/y", {}, sink).error().kind, ErrorKind::usage);
}

TEST(HttpSeamTest, CloudPollPutsForTheImdsTokenThenGetsWithIt) {
  auto fake = std::make_shared<FakeHttpClient>([](const util::HttpRequest& r) -> util::HttpResult {
    if (r.method == util::HttpMethod::put) return test::http_ok("TOKEN-9\n");
    if (r.path == "/latest/meta-data/spot/instance-action")
      return test::http_ok(R"({"action": "terminate", "time": "2020-11-05T08:24:00Z"})");
    return test::http_answer(404);
  });
  auto client = cloud::make_http_metadata_client("http://169.254.169.254", 1'000, fake);
  cloud::NoticePoller poller(cloud::CloudProvider::aws, *client);
  auto notices = poller.poll(1'000);
  ASSERT_TRUE(notices.ok()) << notices.error().message;
  ASSERT_EQ(notices->size(), 1u);
  EXPECT_TRUE((*notices)[0].stop);
  const auto sent = fake->requests();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].method, util::HttpMethod::put);
  EXPECT_EQ(sent[0].url(), "http://169.254.169.254/latest/api/token");
  EXPECT_EQ(sent[0].headers, (util::HttpFields{{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}}));
  EXPECT_EQ(sent[0].content_type, "text/plain");
  EXPECT_TRUE(sent[0].body.empty());
  for (const auto& r : sent) {
    EXPECT_EQ(r.connect_timeout, milliseconds(1'000));
    EXPECT_EQ(r.read_timeout, milliseconds(1'000));
    EXPECT_EQ(r.write_timeout, milliseconds(1'000));
    EXPECT_FALSE(r.follow_redirects);
  }
  EXPECT_EQ(sent[1].method, util::HttpMethod::get);
  EXPECT_EQ(sent[1].path, "/latest/meta-data/spot/instance-action");
  EXPECT_EQ(sent[1].headers, (util::HttpFields{{"X-aws-ec2-metadata-token", "TOKEN-9"}}));
  EXPECT_EQ(sent[2].path, "/latest/meta-data/events/recommendations/rebalance");

  auto slow = std::make_shared<FakeHttpClient>();
  slow->fail("http://169.254.169.254/latest/api/token", util::HttpFailure::connection_timeout);
  auto timed_out = cloud::make_http_metadata_client("http://169.254.169.254", 1'000, slow);
  auto r = timed_out->send({"PUT", "/latest/api/token", {}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::unavailable);
  EXPECT_EQ(r.error().message, "http://169.254.169.254/latest/api/token: connection timed out");
  slow->answer("http://169.254.169.254/big", 200, std::string(70'000, 'x'));
  EXPECT_EQ(timed_out->send({"GET", "/big", {}}).error().message, "/big: answer larger than 65536 bytes");
}

std::string vllm_exposition() {
  return "# TYPE vllm:prompt_tokens_total counter\n"
         "vllm:prompt_tokens_total{model_name=\"m\"} 100\n"
         "# TYPE vllm:generation_tokens_total counter\n"
         "vllm:generation_tokens_total{model_name=\"m\"} 50\n"
         "# TYPE vllm:request_success_total counter\n"
         "vllm:request_success_total{model_name=\"m\",finished_reason=\"stop\"} 3\n";
}

TEST(HttpSeamTest, ServingScrapeAsksForTextAndNamesEachFailure) {
  FakeHttpClient fake;
  auto spec = serving::parse_inference_endpoint("http://10.0.0.5:8000/metrics");
  ASSERT_TRUE(spec.ok());
  fake.answer("http://10.0.0.5:8000/metrics", 200, vllm_exposition());
  auto out = serving::scrape_endpoint(*spec, 700, fake);
  ASSERT_TRUE(out.reading) << out.error << ": " << out.detail;
  EXPECT_EQ(out.reading->models.count("m"), 1u);
  const util::HttpRequest sent = fake.requests().at(0);
  EXPECT_EQ(sent.headers, (util::HttpFields{{"Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1"}}));
  EXPECT_EQ(sent.connect_timeout, milliseconds(700));
  EXPECT_EQ(sent.read_timeout, milliseconds(700));
  EXPECT_EQ(sent.write_timeout, milliseconds(700));

  fake.answer("http://10.0.0.5:8000/metrics", 500, "oops");
  out = serving::scrape_endpoint(*spec, 700, fake);
  EXPECT_EQ(out.error, "http");
  EXPECT_EQ(out.detail, "HTTP status 500");
  fake.fail("http://10.0.0.5:8000/metrics", util::HttpFailure::read);
  out = serving::scrape_endpoint(*spec, 700, fake);
  EXPECT_EQ(out.error, "timeout");
  EXPECT_EQ(out.detail, "no complete answer within 700 ms");
  fake.fail("http://10.0.0.5:8000/metrics", util::HttpFailure::connection);
  out = serving::scrape_endpoint(*spec, 700, fake);
  EXPECT_EQ(out.error, "connect");
  EXPECT_EQ(out.detail, "Connection");
}

TEST(HttpSeamTest, ServingDiscoveryProbesPortsAndAsksSglangWhy) {
  FakeHttpClient fake;
  fake.answer("http://127.0.0.1:30000/metrics", 404, "Not Found");
  fake.answer("http://127.0.0.1:30000/get_server_info", 200,
              R"({"enable_metrics": false, "model_path": "qwen"})");
  fake.answer("http://127.0.0.1:8000/metrics", 200, vllm_exposition());
  const auto probe = serving::probe_engine_ports("127.0.0.1", {30000, 8000}, 500, fake);
  ASSERT_TRUE(probe.found);
  EXPECT_EQ(probe.found->scheme_host_port, "http://127.0.0.1:8000");
  ASSERT_EQ(probe.notes.size(), 1u);
  EXPECT_EQ(
      probe.notes[0],
      "http://127.0.0.1:30000 is an SGLang server (qwen) started without --enable-metrics: it serves no "
      "/metrics; restart it with --enable-metrics");
  EXPECT_EQ(fake.urls(), (std::vector<std::string>{"http://127.0.0.1:30000/metrics",
                                                   "http://127.0.0.1:30000/get_server_info",
                                                   "http://127.0.0.1:8000/metrics"}));
  EXPECT_EQ(fake.requests().at(1).headers, (util::HttpFields{{"Accept", "application/json"}}));
}

TEST(HttpSeamTest, ServingDiscoveryAsksTheKubeletAndNotesItsFailure) {
  FakeHttpClient fake;
  fake.fail("http://127.0.0.1:10255/pods", util::HttpFailure::connection_timeout);
  serving::DiscoveryOptions o;
  o.proc_root = "/nonexistent";
  o.kubelet_pods_url = "http://127.0.0.1:10255/pods";
  o.timeout_ms = 300;
  o.http = &fake;
  std::mutex mu;
  std::vector<std::string> notes;
  o.note = [&](const std::string& n) {
    std::lock_guard lock(mu);
    notes.push_back(n);
  };
  {
    serving::EndpointDiscovery d(o);
    for (int i = 0; i < 100 && d.kubelet_errors() == 0; ++i) {
      d.offer({});
      std::this_thread::sleep_for(milliseconds(20));
    }
    EXPECT_GE(d.kubelet_errors(), 1u);
  }
  const util::HttpRequest sent = fake.requests().at(0);
  EXPECT_EQ(sent.url(), "http://127.0.0.1:10255/pods");
  EXPECT_EQ(sent.headers, (util::HttpFields{{"Accept", "application/json"}}));
  EXPECT_EQ(sent.connect_timeout, milliseconds(300));
  EXPECT_EQ(sent.read_timeout, milliseconds(300));
  std::lock_guard lock(mu);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("http://127.0.0.1:10255/pods: ConnectionTimeout"), std::string::npos) << notes[0];
}

TEST(HttpSeamTest, NotifyWebhookPostsJsonAndSaysWhyItFailed) {
  FakeHttpClient fake;
  const std::string url = "https://hooks.example/services/T1";
  fake.answer(url, 200, "ok");
  guard::GuardEvent e{7,    "warn",        "spent $8", 8 * util::kMicrosPerUsd, 10 * util::kMicrosPerUsd,
                      12.5, "python t.py", "box"};
  ASSERT_TRUE(guard::post_webhook(url, e, 5'000, fake).ok());
  const util::HttpRequest sent = fake.requests().at(0);
  EXPECT_EQ(sent.method, util::HttpMethod::post);
  EXPECT_EQ(sent.scheme_host_port, "https://hooks.example");
  EXPECT_EQ(sent.path, "/services/T1");
  EXPECT_EQ(sent.body, guard::webhook_body(e));
  EXPECT_EQ(sent.content_type, "application/json");
  EXPECT_EQ(sent.connect_timeout, milliseconds(5'000));
  EXPECT_EQ(sent.read_timeout, milliseconds(5'000));
  EXPECT_EQ(sent.write_timeout, milliseconds(5'000));
  fake.answer(url, 500, "no");
  EXPECT_EQ(guard::post_webhook(url, e, 5'000, fake).error().message,
            "--webhook https://hooks.example/services/T1: HTTP status 500");
  fake.fail(url, util::HttpFailure::ssl_server_verification);
  auto failed = guard::post_webhook(url, e, 5'000, fake);
  EXPECT_EQ(failed.error().kind, ErrorKind::unavailable);
  EXPECT_EQ(
      failed.error().message,
      "--webhook https://hooks.example/services/T1: the server's TLS certificate could not be verified");
  fake.fail(url, util::HttpFailure::invalid_url);
  EXPECT_EQ(guard::post_webhook(url, e, 5'000, fake).error().message,
            "--webhook: invalid URL 'https://hooks.example/services/T1'");
  EXPECT_EQ(guard::post_webhook("ftp://x", e, 5'000, fake).error().kind, ErrorKind::usage);
  EXPECT_EQ(fake.requests().size(), 4u) << "ftp:// is refused before any request";
}

TEST(HttpSeamTest, FleetQueriesPrometheusWithEncodedParams) {
  FakeHttpClient fake([](const util::HttpRequest& r) -> util::HttpResult {
    if (r.path != "/api/v1/query" || r.params.size() != 1 || r.params[0].first != "query")
      return test::http_answer(400, R"({"status":"error","error":"bad"})");
    return test::http_ok(R"({"status":"success","data":{"resultType":"vector","result":[]}})");
  });
  auto rep = report::query_fleet_report("http://prom:9090", 3'600'000, "namespace", fake);
  ASSERT_TRUE(rep.ok()) << rep.error().message;
  const auto sent = fake.requests();
  ASSERT_GE(sent.size(), 4u);
  EXPECT_EQ(sent[0].scheme_host_port, "http://prom:9090");
  EXPECT_EQ(sent[0].params,
            (util::HttpFields{{"query", "sum(increase(gpumeter_gpu_cost_usd_total[3600s]))"}}));
  EXPECT_EQ(sent[0].connect_timeout, seconds(5));
  EXPECT_EQ(sent[0].read_timeout, seconds(60));
  EXPECT_FALSE(sent[0].write_timeout);

  FakeHttpClient down;
  auto failed = report::query_fleet_report("http://prom:9090", 3'600'000, "namespace", down);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().kind, ErrorKind::unavailable);
  EXPECT_EQ(failed.error().message,
            "--prometheus http://prom:9090: cannot connect (nothing listening, or the host is unreachable)");
}

TEST(HttpSeamTest, NodeGuardReadsTheAgentsAutostopFromItsMetrics) {
  FakeHttpClient fake;
  fake.answer("http://127.0.0.1:9400/metrics", 200,
              "gpumeter_autostop_remaining_seconds 250\ngpumeter_node_idle_seconds 1550\n");
  EXPECT_EQ(agent::autostop_text("127.0.0.1:9400", 300, fake),
            "autostop in 4m 10s (every GPU idle for 25m 50s)");
  const util::HttpRequest sent = fake.requests().at(0);
  EXPECT_EQ(sent.connect_timeout, milliseconds(300));
  EXPECT_EQ(sent.read_timeout, milliseconds(300));
  EXPECT_FALSE(sent.write_timeout);
  fake.answer("http://127.0.0.1:9400/metrics", 200,
              "gpumeter_autostop_remaining_seconds 0\ngpumeter_node_idle_seconds 3700\n");
  EXPECT_EQ(agent::autostop_text("127.0.0.1:9400", 300, fake),
            "autostop ran (every GPU idle for 1h 01m 40s)");
  fake.answer("http://127.0.0.1:9400/metrics", 503, "");
  EXPECT_FALSE(agent::autostop_text("127.0.0.1:9400", 300, fake));
  fake.fail("http://127.0.0.1:9400/metrics", util::HttpFailure::read);
  EXPECT_FALSE(agent::autostop_text("127.0.0.1:9400", 300, fake));
}

}  // namespace
}  // namespace gm
