// Kubernetes device assignments: naming pod owners from the kubelet's pod-resources answer, and charging
// devices that a pod holds but does not use this interval.
#include <algorithm>
#include <set>
#include <unordered_map>
#include <utility>

#include "agent/collector.h"

namespace gm::agent {

bool DeviceHolders::empty() const {
  return board.empty() && std::all_of(mig.begin(), mig.end(), [](const auto& m) { return m.empty(); });
}

std::vector<DeviceHolders> device_holders(const std::vector<gpu::DeviceInfo>& devices,
                                          const std::vector<kubelet::PodDeviceAssignment>& assignments) {
  std::vector<DeviceHolders> out(devices.size());
  // UUID → (device, MIG entry or npos for the board).
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> where;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    out[i].mig.resize(devices[i].mig_instances.size());
    if (!devices[i].uuid.empty()) where[devices[i].uuid] = {i, std::string::npos};
    for (std::size_t j = 0; j < devices[i].mig_instances.size(); ++j)
      if (!devices[i].mig_instances[j].uuid.empty()) where[devices[i].mig_instances[j].uuid] = {i, j};
  }
  for (const auto& a : assignments) {
    auto it = where.find(kubelet::device_uuid_of(a.device_id));
    if (it == where.end()) continue;
    const auto [i, j] = it->second;
    auto& list = j == std::string::npos ? out[i].board : out[i].mig[j];
    list.push_back(PodContainerRef{a.pod_namespace, a.pod, a.container});
  }
  auto tidy = [](std::vector<PodContainerRef>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  for (auto& h : out) {
    tidy(h.board);
    for (auto& m : h.mig) tidy(m);
  }
  return out;
}

void name_pods_from_holders(std::map<std::uint32_t, sys::Owner>& owner_of,
                            const std::vector<std::vector<std::uint32_t>>& pids_by_device,
                            const std::vector<DeviceHolders>& holders) {
  using Key = std::pair<std::string, std::string>;  // (pod UID, container id)
  // Candidates of each (pod UID, container): the holders common to every device its processes run on.
  std::map<Key, std::set<PodContainerRef>> candidates;
  for (std::size_t i = 0; i < pids_by_device.size() && i < holders.size(); ++i) {
    std::set<PodContainerRef> here(holders[i].board.begin(), holders[i].board.end());
    for (const auto& m : holders[i].mig) here.insert(m.begin(), m.end());
    for (std::uint32_t pid : pids_by_device[i]) {
      auto it = owner_of.find(pid);
      if (it == owner_of.end() || it->second.kind != sys::OwnerKind::pod || it->second.pod_uid.empty())
        continue;
      const Key k{it->second.pod_uid, it->second.container_id};
      auto [c, fresh] = candidates.try_emplace(k, here);
      if (fresh) continue;
      std::set<PodContainerRef> both;
      std::set_intersection(c->second.begin(), c->second.end(), here.begin(), here.end(),
                            std::inserter(both, both.end()));
      c->second = std::move(both);
    }
  }
  // A container match when one container remains; a pod match when the rest all belong to one pod.
  using PodName = std::pair<std::string, std::string>;  // (namespace, pod)
  std::map<Key, PodContainerRef> container_match;
  std::map<std::string, std::set<PodName>> pods_of_uid;
  for (const auto& [k, c] : candidates) {
    if (c.empty()) continue;
    const PodName first{c.begin()->pod_namespace, c.begin()->pod};
    const bool one_pod = std::all_of(c.begin(), c.end(), [&](const PodContainerRef& r) {
      return r.pod_namespace == first.first && r.pod == first.second;
    });
    if (!one_pod) continue;
    pods_of_uid[k.first].insert(first);
    if (c.size() == 1) container_match[k] = *c.begin();
  }
  // Accept a pod name only when its UID's containers agree on it and no other UID claims it.
  std::map<PodName, int> claims;
  for (const auto& [uid, names] : pods_of_uid)
    if (names.size() == 1) ++claims[*names.begin()];
  std::map<std::string, PodName> accepted;
  for (const auto& [uid, names] : pods_of_uid)
    if (names.size() == 1 && claims[*names.begin()] == 1) accepted[uid] = *names.begin();
  for (auto& [pid, o] : owner_of) {
    if (o.kind != sys::OwnerKind::pod) continue;
    auto a = accepted.find(o.pod_uid);
    if (a == accepted.end()) continue;
    o.pod_namespace = a->second.first;
    o.pod = a->second.second;
    o.name = o.pod_namespace + "/" + o.pod;
    auto c = container_match.find(Key{o.pod_uid, o.container_id});
    if (c != container_match.end() && !c->second.container.empty()) o.container = c->second.container;
  }
}

std::vector<HeldShare> split_held_device(MicroUsd device_cost, const gpu::DeviceInfo& info,
                                         const DeviceHolders& holders) {
  std::vector<HeldShare> out;
  MicroUsd given = 0;
  auto equal = [&out, &given](MicroUsd amount, double weight, const std::vector<PodContainerRef>& hs) {
    const std::vector<MicroUsd> parts = meter::split_equally(amount, hs.size());
    given += amount;
    for (std::size_t k = 0; k < hs.size(); ++k)
      out.push_back(HeldShare{hs[k], parts[k], weight / static_cast<double>(hs.size())});
  };
  if (!holders.board.empty()) {
    equal(device_cost, 1.0, holders.board);
    return out;
  }
  for (std::size_t j = 0; j < holders.mig.size() && j < info.mig_instances.size(); ++j) {
    if (holders.mig[j].empty()) continue;
    const gpu::MigInstance& m = info.mig_instances[j];
    const auto share = meter::mig_share(m, info.memory_total_bytes);
    if (!share) continue;  // no size known: this instance's part stays unallocated
    const std::uint64_t den = share->den, num = std::min(share->num, den);
    // Capped so that slice sizes that add up to more than the board never charge more than the board.
    const auto amount = std::min<MicroUsd>(meter::share_of_micros(device_cost, num, den),
                                           meter::budget_left_micros(device_cost, given));
    equal(amount, static_cast<double>(num) / static_cast<double>(den), holders.mig[j]);
  }
  return out;
}

}  // namespace gm::agent
