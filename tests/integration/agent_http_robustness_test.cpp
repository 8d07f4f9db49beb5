// The agent's HTTP server under hostile clients, through the real binary on loopback: malformed request
// lines, huge headers, slowloris-style partial requests, bad basic-auth headers. Whatever they send: each
// gets an error status or a closed connection within a deadline, honest scrapes keep being answered quickly,
// memory stays bounded, and the agent exits 0 on SIGTERM with no sanitizer report.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "integration/agent_fixture.h"

namespace gm::test {
namespace {

using Clock = std::chrono::steady_clock;

std::string scenario() {
  return R"({"driver_version": "580.95.05", "devices": [{"name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-http-0", "memory_total_mib": 81559, "power_limit_w": 700,
    "timeline": [{"t": 0, "util": 50, "mem_used_mib": 1000, "power_w": 300, "temp_c": 50, "processes": []}]}]})";
}

/// A raw TCP connection to the agent.
class Conn {
 public:
  explicit Conn(int port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Conn() {
    if (fd_ >= 0) close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  bool connected() const { return connected_; }
  /// Sends all of `data`; false when the server closed the connection first.
  bool send_all(const std::string& data) {
    std::size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  /// Reads until the server closes, a whole response (status, headers, Content-Length bytes of body) has
  /// arrived, or `timeout_s` passes; `closed` tells whether the server closed.
  std::string read_all(double timeout_s, bool& closed) {
    std::string out;
    closed = false;
    const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      const int left_ms =
          static_cast<int>(std::chrono::duration<double, std::milli>(end - Clock::now()).count());
      if (poll(&p, 1, std::max(1, left_ms)) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed = true;
        break;
      }
      out.append(buf, static_cast<std::size_t>(n));
      if (out.size() > (8u << 20) || complete(out)) break;
    }
    return out;
  }

 private:
  static bool complete(const std::string& response) {
    const auto end = response.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    const auto cl = response.find("Content-Length: ");
    if (cl == std::string::npos || cl > end) return true;
    return response.size() >= end + 4 + std::stoul(response.substr(cl + 16));
  }
  int fd_;
  bool connected_ = false;
};

/// "HTTP/1.1 400 Bad Request..." -> 400; 0 when there is no status line.
int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.substr(9, 3).c_str());
}

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned v = 0;
  int bits = -6;
  for (char ch : in) {
    v = (v << 8) + static_cast<unsigned char>(ch);
    bits += 8;
    while (bits >= 0) {
      out.push_back(t[(v >> bits) & 0x3F]);
      bits -= 6;
    }
  }
  if (bits > -6) out.push_back(t[((v << 8) >> (bits + 8)) & 0x3F]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

/// Resident memory of a process in KiB (0 if unknown).
long rss_kib(pid_t pid) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const auto p = status.find("VmRSS:");
  return p == std::string::npos ? 0 : std::atol(status.c_str() + p + 6);
}

class AgentHttpRobustnessIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GM_ASSERT_BUILT(); }
  void TearDown() override {
    if (agent_) {
      EXPECT_TRUE(agent_->running()) << "the agent died: " << agent_->stderr_text();
      EXPECT_EQ(agent_->terminate(), 0) << agent_->stderr_text();
      EXPECT_EQ(sanitizer_report(agent_->stderr_text()), "");
    }
    agent_.reset();
  }
  void start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags{"--price", "3.6", "--interval", "200ms"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    agent_ = start_agent(dir_.write("scenario.json", scenario()), dir_.path(), flags, port_);
    ASSERT_GT(port_, 0) << agent_->stderr_text();
  }
  /// Sends one raw request on a fresh connection; the status of the answer (0: closed without one) and
  /// whether the server answered or closed within `deadline_s`.
  int raw(const std::string& request, double deadline_s = 8, bool* in_time = nullptr) {
    Conn c(port_);
    EXPECT_TRUE(c.connected());
    c.send_all(request);
    bool closed = false;
    const auto t0 = Clock::now();
    const std::string response = c.read_all(deadline_s, closed);
    const bool quick = closed || !response.empty();
    if (in_time) *in_time = quick && std::chrono::duration<double>(Clock::now() - t0).count() < deadline_s;
    return status_of(response);
  }
  /// An honest scrape answered with 200 within `max_s`.
  ::testing::AssertionResult scrape_ok(double max_s = 2.0, const std::vector<std::string>& auth = {}) {
    const auto t0 = Clock::now();
    std::vector<std::string> extra{"-o", "/dev/null", "-w", "%{http_code}"};
    extra.insert(extra.end(), auth.begin(), auth.end());
    const CmdResult r = curl("http://127.0.0.1:" + std::to_string(port_) + "/metrics", extra, max_s + 3);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r.out != "200") return ::testing::AssertionFailure() << "scrape answered '" << r.out << "' " << r.err;
    if (took > max_s) return ::testing::AssertionFailure() << "scrape took " << took << " s";
    return ::testing::AssertionSuccess();
  }
  TempDir dir_;
  std::unique_ptr<Background> agent_;
  int port_ = 0;
};

TEST_F(AgentHttpRobustnessIntegrationTest, MalformedRequestLinesGetAnErrorOrAClose) {
  start();
  const std::vector<std::string> bad = {
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "GET /metrics\r\n\r\n",
      "GET /metrics HTTP/9.9\r\n\r\n",
      "GET  /metrics  HTTP/1.1\r\n\r\n",
      std::string("\x00\xff\xfe\x16\x03\x01\x02\x00", 8) + "\r\n\r\n",
      "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",  // a TLS ClientHello to the plain-HTTP port
      "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics?%zz%%%00 HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /../../../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789",
      "POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxyz\r\n0\r\n\r\n",
      "DELETE / HTTP/1.1\r\nHost: x\r\n\r\n",
      "\r\n\r\n\r\n\r\n",
      "GET /metrics HTTP/1.1\nHost: x\n\n",
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    bool in_time = false;
    const int status = raw(bad[i], 8, &in_time);
    EXPECT_TRUE(in_time) << "request " << i << " was neither answered nor closed within 8 s";
    EXPECT_TRUE(status == 0 || (status >= 200 && status < 500)) << "request " << i << " got " << status;
  }
  // The bare-LF request is answered as a scrape (lenient like curl and Prometheus expect); the server is
  // fine.
  EXPECT_TRUE(scrape_ok());
}

TEST_F(AgentHttpRobustnessIntegrationTest, HugeHeadersAreRefusedAndMemoryStaysBounded) {
  start();
  ASSERT_TRUE(scrape_ok());
  const long rss_before = rss_kib(agent_->pid());
  // One header line far over the limit.
  bool in_time = false;
  int status = raw("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(200'000, 'b') + "\r\n\r\n", 8,
                   &in_time);
  EXPECT_TRUE(in_time);
  EXPECT_TRUE(status == 0 || (status >= 400 && status < 500)) << status;
  // Many header lines, each under the line limit: 64 MiB of headers sent as fast as the agent reads them.
  {
    Conn c(port_);
    ASSERT_TRUE(c.connected());
    std::string head = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    const std::string line = "X-Filler: " + std::string(4000, 'f') + "\r\n";
    std::string chunk;
    for (int i = 0; i < 256; ++i) chunk += line;
    c.send_all(head);
    std::size_t sent = 0;
    const auto end = Clock::now() + std::chrono::seconds(20);
    while (sent < (64u << 20) && Clock::now() < end && c.send_all(chunk)) sent += chunk.size();
    c.send_all("\r\n");
    bool closed = false;
    const std::string response = c.read_all(8, closed);
    status = status_of(response);
    EXPECT_TRUE(status == 0 || (status >= 400 && status < 500))
        << status << " after " << sent << " bytes of headers";
  }
  EXPECT_TRUE(scrape_ok());
  const long rss_after = rss_kib(agent_->pid());
  EXPECT_LT(rss_after - rss_before, 32 * 1024)
      << "RSS grew from " << rss_before << " KiB to " << rss_after << " KiB";
}

TEST_F(AgentHttpRobustnessIntegrationTest, SlowlorisClientsDoNotStarveScrapes) {
  start();
  ASSERT_TRUE(scrape_ok());
  // 64 clients that send part of a request line and stall, 16 that trickle a header byte every 500 ms.
  std::vector<std::unique_ptr<Conn>> stalled, trickling;
  for (int i = 0; i < 64; ++i) {
    stalled.push_back(std::make_unique<Conn>(port_));
    ASSERT_TRUE(stalled.back()->connected());
    stalled.back()->send_all(i % 2 ? "GET /metr" : "GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: ");
  }
  for (int i = 0; i < 16; ++i) {
    trickling.push_back(std::make_unique<Conn>(port_));
    ASSERT_TRUE(trickling.back()->connected());
    trickling.back()->send_all("GET /metrics HTTP/1.1\r\nX-Slow: ");
  }
  const auto t0 = Clock::now();
  int scrapes = 0;
  while (Clock::now() - t0 < std::chrono::seconds(4)) {
    for (auto& t : trickling) t->send_all("a");
    EXPECT_TRUE(scrape_ok(1.5)) << "scrape " << scrapes << " with 80 slow clients connected";
    ++scrapes;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  // The stalled and the trickling ones are cut off by the server's request deadline: an error answer, then
  // the connection is closed.
  auto cut_off = [](Conn& c, double wait_s, const std::string& who) {
    bool closed = false;
    std::string response = c.read_all(wait_s, closed);
    if (!closed) response += c.read_all(1.0, closed);
    EXPECT_TRUE(closed) << who << " still open after the request deadline";
    const int status = status_of(response);
    EXPECT_TRUE(status == 0 || (status >= 400 && status < 500)) << who << ": " << status;
  };
  for (std::size_t i = 0; i < stalled.size(); ++i)
    cut_off(*stalled[i], i == 0 ? 10.0 : 1.0, "stalled client " + std::to_string(i));
  for (std::size_t i = 0; i < trickling.size(); ++i)
    cut_off(*trickling[i], i == 0 ? 5.0 : 1.0, "trickling client " + std::to_string(i));
  EXPECT_TRUE(scrape_ok());
}

TEST_F(AgentHttpRobustnessIntegrationTest, BadBasicAuthHeadersAre401) {
  // bcrypt hash of "s3cret" (cost 4).
  dir_.write("web.yml",
             "basic_auth_users:\n  alice: $2b$04$psC21kNK63cC3cuY4Vb60.tPCaryZtpMd5bvoO1Ae1B2hJEnSnWG6\n");
  start({"--web-config", dir_.path() + "/web.yml"});
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  auto with = [&](const std::string& header) { return raw(req + header + "\r\n\r\n"); };
  EXPECT_EQ(with("Authorization: Basic " + base64("alice:s3cret")), 200);
  const std::vector<std::string> bad = {
      "X-None: 1",
      "Authorization:",
      "Authorization: Basic",
      "Authorization: Basic ",
      "Authorization: Basic !!!!****",
      "Authorization: Basic =====",
      "Authorization: Basic " + base64("alice"),
      "Authorization: Basic " + base64("alice:"),
      "Authorization: Basic " + base64(":s3cret"),
      "Authorization: Basic " + base64("alice:wrong"),
      "Authorization: Basic " + base64("bob:s3cret"),
      "Authorization: Basic " + base64("alice:s3cret").substr(1),
      "Authorization: Basic " + base64(std::string("alice\0:s3cret", 13)),
      "Authorization: Basic " + base64(std::string("alice:s3cret\0", 13)),
      "Authorization: Basic " + base64("alice:" + std::string(6000, 'p')),
      "Authorization: Bearer " + base64("alice:s3cret"),
      "Authorization: Digest username=\"alice\"",
      "Authorization: Basic " + base64("alice:s3cret") + "garbage",
      "Authorization: Basic " + std::string(7000, 'A'),
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    const int status = with(bad[i]);
    EXPECT_TRUE(status == 401 || status == 400 || status == 431) << "header " << i << " got " << status;
  }
  // Two Authorization headers: the wrong one must not be ignored in favour of the right one, or vice versa.
  const int twice =
      with("Authorization: Basic " + base64("bob:x") + "\r\nAuthorization: Basic " + base64("alice:s3cret"));
  EXPECT_TRUE(twice == 200 || twice == 401) << twice;
  EXPECT_TRUE(scrape_ok(2.0, {"-u", "alice:s3cret"}));
}

}  // namespace
}  // namespace gm::test
