// libFuzzer target: the kubelet's pod-resources answer (protobuf v1.ListPodResourcesResponse) and its mapping
// to the GPUs and MIG instances of the node, then the split of an idle held device over its holders.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "fuzz_util.h"
#include "kubelet/pod_resources.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  const std::string_view wire(reinterpret_cast<const char*>(data), size);
  auto assignments = gm::kubelet::parse_pod_resources_response(wire);
  if (!assignments) return 0;
  for (const auto& a : *assignments) (void)gm::kubelet::device_uuid_of(a.device_id);

  std::vector<gm::gpu::DeviceInfo> devices(2);
  devices[0].index = 0;
  devices[0].uuid = "GPU-11111111-2222-3333-4444-555555555555";
  devices[1].index = 1;
  devices[1].uuid = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
  devices[1].mig_enabled = true;
  for (unsigned i = 0; i < 3; ++i) {
    gm::gpu::MigInstance m;
    m.index = i;
    m.uuid = "MIG-aaaaaaaa-bbbb-cccc-dddd-00000000000" + std::to_string(i);
    m.gpu_instance_id = i;
    if (i != 2) m.slice_count = i + 1;
    m.board_slices = 7;
    m.memory_total_bytes = std::uint64_t{10} << 30;
    devices[1].mig_instances.push_back(m);
  }
  const auto holders = gm::agent::device_holders(devices, *assignments);
  check(holders.size() == devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i) {
    check(holders[i].mig.size() == devices[i].mig_instances.size());
    const gm::util::MicroUsd device_cost = 1'000'003;
    gm::util::MicroUsd sum = 0;
    for (const auto& share : gm::agent::split_held_device(device_cost, devices[i], holders[i])) {
      check(share.cost >= 0 && share.weight >= 0 && share.weight <= 1.0 + 1e-9);
      sum += share.cost;
    }
    check(sum <= device_cost);
  }
  return 0;
}
