#pragma once
// Which devices the kubelet assigned to which pod containers, from its pod-resources API
// (gRPC v1.PodResourcesLister/List on /var/lib/kubelet/pod-resources/kubelet.sock). gRPC types stay in the
// implementation; callers see plain structs, a source interface (real and fake) and a cache that asks the
// kubelet at most every few seconds and keeps the last good answer through short outages.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/clock.h"
#include "util/result.h"

namespace gm::kubelet {

/// The kubelet's default pod-resources socket.
inline constexpr const char* kDefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// One device the kubelet assigned to one container of one pod.
struct PodDeviceAssignment {
  std::string pod_namespace;
  std::string pod;
  std::string container;
  std::string resource_name;   ///< e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
  std::string device_id;       ///< as the device plugin names it: "GPU-…", "MIG-…", "GPU-…::2" (time-slicing replica)
  bool operator==(const PodDeviceAssignment&) const = default;
};

/// The device UUID a device-plugin id stands for: a time-slicing replica suffix "::N" is dropped.
std::string device_uuid_of(std::string_view device_id);

/// The assignments in a serialized v1.ListPodResourcesResponse (protobuf wire format, as the kubelet sends it):
/// one entry per device id of each container; error (unavailable) when the bytes are not such a message.
Result<std::vector<PodDeviceAssignment>> parse_pod_resources_response(std::string_view wire);

/// Where pod-resources answers come from (the kubelet's socket, or a fake in tests).
class PodResourcesSource {
 public:
  virtual ~PodResourcesSource() = default;
  /// Every device assigned to a container now. Error kind not_found when there is no kubelet socket (not
  /// Kubernetes: normal), unavailable when the kubelet cannot be asked or answers an error.
  virtual Result<std::vector<PodDeviceAssignment>> list() = 0;
};

/// The kubelet's pod-resources API over its unix socket, each call bounded by a deadline.
class KubeletPodResources final : public PodResourcesSource {
 public:
  /// `socket_path` is a file path (no "unix://" prefix); `deadline_ms` bounds each List call.
  explicit KubeletPodResources(std::string socket_path, std::int64_t deadline_ms = 1000);
  ~KubeletPodResources() override;
  KubeletPodResources(const KubeletPodResources&) = delete;
  KubeletPodResources& operator=(const KubeletPodResources&) = delete;
  /// Calls List once (see PodResourcesSource::list).
  Result<std::vector<PodDeviceAssignment>> list() override;
  /// The socket path asked.
  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Impl;
  std::string socket_path_;
  std::int64_t deadline_ms_;
  std::unique_ptr<Impl> impl_;
};

/// How often the cache asks and how long a last good answer outlives failures.
struct PodResourcesCacheOptions {
  std::int64_t refresh_ms = 10000;   ///< ask at most this often
  std::int64_t keep_ms = 60000;      ///< after failures, keep the last good answer this long, then drop it
};

/// Caches a source's answer. Not thread-safe: one thread (the collector) calls refresh() and reads.
class PodResourcesCache {
 public:
  /// Source and clock must outlive the cache.
  PodResourcesCache(PodResourcesSource& source, util::Clock& clock, PodResourcesCacheOptions options = {});
  /// Asks the source when refresh_ms have passed since the last ask (the first call always asks); may block
  /// for the source's deadline, so call it outside any lock a scrape takes.
  void refresh();
  /// The assignments in force: the last good answer (empty before one, or once it is older than keep_ms
  /// while asks keep failing).
  const std::vector<PodDeviceAssignment>& assignments() const { return assignments_; }
  /// True when the last ask succeeded.
  bool up() const { return up_; }
  /// Failed asks while a socket was there (a missing socket is not counted).
  std::uint64_t errors() const { return errors_; }
  /// The last failure's message ("" when the last ask succeeded).
  const std::string& last_error() const { return last_error_; }
  /// Increases whenever assignments() changes.
  std::uint64_t generation() const { return generation_; }

 private:
  PodResourcesSource& source_;
  util::Clock& clock_;
  PodResourcesCacheOptions options_;
  std::vector<PodDeviceAssignment> assignments_;
  bool asked_ = false;
  bool up_ = false;
  std::uint64_t errors_ = 0;
  std::uint64_t generation_ = 0;
  std::int64_t last_ask_ns_ = 0;
  std::int64_t last_good_ns_ = 0;
  std::string last_error_;
};

}  // namespace gm::kubelet
