#pragma once
// Stand-ins for the cloud metadata services on loopback (ephemeral ports), each built from its provider's
// documented format (AWS IMDSv2 token + spot/instance-action, GCP instance/preempted, Azure Scheduled
// Events), and a service that accepts connections and never answers.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cloud/cloud.h"

namespace gm::test {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// A metadata service stand-in on 127.0.0.1:<ephemeral>, answering as `provider` documents; no notice until
/// notify() is called.
class MetadataStandIn {
 public:
  explicit MetadataStandIn(cloud::CloudProvider provider) : provider_(provider) {
    if (provider == cloud::CloudProvider::aws) {
      server_.Put("/latest/api/token", [this](const httplib::Request& req, httplib::Response& res) {
        if (!req.has_header("X-aws-ec2-metadata-token-ttl-seconds")) {
          res.status = 400;
          return;
        }
        res.set_content("AQAEAFakeToken==", "text/plain");
      });
      server_.Get("/latest/meta-data/spot/instance-action", [this](const httplib::Request& req,
                                                                   httplib::Response& res) {
        if (req.get_header_value("X-aws-ec2-metadata-token") != "AQAEAFakeToken==") {
          res.status = 401;
          return;
        }
        if (!noticed_) {
          res.status = 404;
          return;
        }
        served();
        res.set_content(
            nlohmann::json{{"action", "terminate"}, {"time", cloud::format_iso8601(deadline_ms_)}}.dump(),
            "application/json");
      });
      server_.Get("/latest/meta-data/events/recommendations/rebalance",
                  [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
    } else if (provider == cloud::CloudProvider::gcp) {
      server_.Get("/computeMetadata/v1/instance/preempted",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    if (req.get_header_value("Metadata-Flavor") != "Google") {
                      res.status = 403;
                      return;
                    }
                    if (noticed_) served();
                    res.set_header("Metadata-Flavor", "Google");
                    res.set_content(noticed_ ? "TRUE" : "FALSE", "application/text");
                  });
      server_.Get("/computeMetadata/v1/instance/maintenance-event",
                  [](const httplib::Request&, httplib::Response& res) {
                    res.set_content("NONE", "application/text");
                  });
    } else {
      server_.Get("/metadata/instance/compute/name", [](const httplib::Request& req, httplib::Response& res) {
        if (req.get_header_value("Metadata") != "true") {
          res.status = 400;
          return;
        }
        res.set_content("gpu-vm-7", "text/plain");
      });
      server_.Get("/metadata/scheduledevents", [this](const httplib::Request& req, httplib::Response& res) {
        if (req.get_header_value("Metadata") != "true" || !req.has_param("api-version")) {
          res.status = 400;
          return;
        }
        nlohmann::json events = nlohmann::json::array();
        if (noticed_) {
          served();
          const std::time_t t = static_cast<std::time_t>(deadline_ms_ / 1000);
          std::tm tm{};
          gmtime_r(&t, &tm);
          char not_before[64];
          std::strftime(not_before, sizeof not_before, "%a, %d %b %Y %H:%M:%S GMT", &tm);
          events.push_back({{"EventId", "602d9444-d2cd-49c7-8624-8643e7171297"},
                            {"EventType", "Preempt"},
                            {"ResourceType", "VirtualMachine"},
                            {"Resources", {"gpu-vm-7"}},
                            {"EventStatus", "Scheduled"},
                            {"NotBefore", not_before},
                            {"Description", "Virtual machine is being preempted."},
                            {"EventSource", "Platform"},
                            {"DurationInSeconds", -1}});
        }
        res.set_content(nlohmann::json{{"DocumentIncarnation", noticed_ ? 1 : 0}, {"Events", events}}.dump(),
                        "application/json");
      });
    }
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~MetadataStandIn() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// From now on the service announces the preemption, with this much notice.
  void notify(std::int64_t notice_ms) {
    deadline_ms_ = static_cast<std::int64_t>(now_s() * 1000) + notice_ms;
    notified_at_ = now_s();
    noticed_ = true;
  }
  double notified_at() const { return notified_at_; }
  double first_served_at() const { return first_served_.load(); }

 private:
  void served() {
    double expected = 0;
    first_served_.compare_exchange_strong(expected, now_s());
  }
  cloud::CloudProvider provider_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> noticed_{false};
  std::atomic<std::int64_t> deadline_ms_{0};
  std::atomic<double> notified_at_{0};
  std::atomic<double> first_served_{0};
};

/// A TCP port that accepts connections (the kernel's backlog) and never answers.
class HangingService {
 public:
  HangingService() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 64);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~HangingService() { close(fd_); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace gm::test
