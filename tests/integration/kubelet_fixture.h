#pragma once
// A stand-in for the kubelet's pod-resources service: a real gRPC server implementing
// v1.PodResourcesLister/List on a unix socket (the kubelet itself cannot run here), answering with fixed
// assignments.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "podresources.grpc.pb.h"

namespace gm::test {

struct Assigned {
  std::string pod_namespace, pod, container, resource, device_id;
};

/// The kubelet's pod-resources service, answering List with fixed assignments.
class FakeKubelet final : public v1::PodResourcesLister::Service {
 public:
  explicit FakeKubelet(std::vector<Assigned> assigned) : assigned_(std::move(assigned)) {}
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    ++calls;
    if (delay_ms.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    for (const auto& a : assigned_) {
      v1::PodResources* pod = response->add_pod_resources();
      pod->set_name(a.pod);
      pod->set_namespace_(a.pod_namespace);
      v1::ContainerResources* c = pod->add_containers();
      c->set_name(a.container);
      v1::ContainerDevices* d = c->add_devices();
      d->set_resource_name(a.resource);
      d->add_device_ids(a.device_id);
    }
    // A pod with CPUs only: no devices, ignored.
    v1::PodResources* cpu_only = response->add_pod_resources();
    cpu_only->set_name("web-0");
    cpu_only->set_namespace_("frontend");
    cpu_only->add_containers()->set_name("nginx");
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::atomic<int> delay_ms{0};

 private:
  std::vector<Assigned> assigned_;
};

/// A gRPC server on a unix socket, shut down at destruction.
class KubeletServer {
 public:
  KubeletServer(const std::string& socket_path, std::vector<Assigned> assigned)
      : service_(std::move(assigned)) {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
  }
  ~KubeletServer() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  bool started() const { return server_ != nullptr; }
  int calls() const { return service_.calls.load(); }
  /// Makes List answer only after `ms`.
  void delay(int ms) { service_.delay_ms.store(ms); }

 private:
  FakeKubelet service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gm::test
