#include "kubelet/pod_resources.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cstring>

#include "podresources.grpc.pb.h"

namespace gm::kubelet {

std::string device_uuid_of(std::string_view device_id) {
  const auto sep = device_id.find("::");
  return std::string(sep == std::string_view::npos ? device_id : device_id.substr(0, sep));
}

namespace {

std::vector<PodDeviceAssignment> assignments_of(const v1::ListPodResourcesResponse& response) {
  std::vector<PodDeviceAssignment> out;
  for (const auto& pod : response.pod_resources())
    for (const auto& c : pod.containers())
      for (const auto& d : c.devices())
        for (const auto& id : d.device_ids())
          out.push_back(PodDeviceAssignment{pod.namespace_(), pod.name(), c.name(), d.resource_name(), id});
  return out;
}

}  // namespace

Result<std::vector<PodDeviceAssignment>> parse_pod_resources_response(std::string_view wire) {
  v1::ListPodResourcesResponse response;
  if (wire.size() > static_cast<std::size_t>(INT32_MAX) ||
      !response.ParseFromArray(wire.data(), static_cast<int>(wire.size())))
    return make_error(ErrorKind::unavailable, "kubelet pod-resources: the answer is not a ListPodResourcesResponse");
  return assignments_of(response);
}

struct KubeletPodResources::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::PodResourcesLister::Stub> stub;
};

KubeletPodResources::KubeletPodResources(std::string socket_path, std::int64_t deadline_ms)
    : socket_path_(std::move(socket_path)), deadline_ms_(deadline_ms), impl_(std::make_unique<Impl>()) {}

KubeletPodResources::~KubeletPodResources() = default;

Result<std::vector<PodDeviceAssignment>> KubeletPodResources::list() {
  struct stat st {};
  if (::stat(socket_path_.c_str(), &st) != 0) {
    const int err = errno;
    const ErrorKind kind = err == ENOENT || err == ENOTDIR ? ErrorKind::not_found : ErrorKind::unavailable;
    return make_error(kind, "kubelet pod-resources socket " + socket_path_ + ": " + std::strerror(err));
  }
  if (!S_ISSOCK(st.st_mode))
    return make_error(ErrorKind::unavailable, "kubelet pod-resources socket " + socket_path_ + ": not a socket");
  if (!impl_->stub) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 * 1024 * 1024);  // large nodes list many pods
    impl_->channel = grpc::CreateCustomChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials(), args);
    impl_->stub = v1::PodResourcesLister::NewStub(impl_->channel);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms_));
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
  const grpc::Status status = impl_->stub->List(&ctx, request, &response);
  if (!status.ok()) {
    // A fresh channel next time: a failed one may sit in reconnect back-off long after the kubelet is back.
    impl_->stub.reset();
    impl_->channel.reset();
    return make_error(ErrorKind::unavailable, "kubelet pod-resources " + socket_path_ + ": List: " +
                                                  status.error_message() + " (gRPC status " +
                                                  std::to_string(static_cast<int>(status.error_code())) + ")");
  }
  return assignments_of(response);
}

PodResourcesCache::PodResourcesCache(PodResourcesSource& source, util::Clock& clock,
                                     PodResourcesCacheOptions options)
    : source_(source), clock_(clock), options_(options) {}

void PodResourcesCache::refresh() {
  const std::int64_t now = clock_.monotonic_ns();
  if (asked_ && now - last_ask_ns_ < options_.refresh_ms * 1'000'000) return;
  asked_ = true;
  last_ask_ns_ = now;
  auto r = source_.list();
  if (r) {
    up_ = true;
    last_error_.clear();
    last_good_ns_ = now;
    if (*r != assignments_) ++generation_;
    assignments_ = std::move(*r);
    return;
  }
  up_ = false;
  last_error_ = r.error().message;
  if (r.error().kind != ErrorKind::not_found) ++errors_;
  if (!assignments_.empty() && now - last_good_ns_ >= options_.keep_ms * 1'000'000) {
    assignments_.clear();
    ++generation_;
  }
}

}  // namespace gm::kubelet
