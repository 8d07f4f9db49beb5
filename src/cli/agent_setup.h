#pragma once
// Shared by `agent` and `top`: price of every device from the pricing flags, and the kubelet
// pod-resources reader.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu.h"
#include "kubelet/pod_resources.h"
#include "meter/meter.h"
#include "sys/owner.h"
#include "util/result.h"

namespace gm::cli {

/// Price per device (nullopt for a GPU with no known price); error when explicit pricing flags fail.
Result<std::vector<std::optional<meter::PriceQuote>>> agent_prices(const meter::PricingOptions& pricing,
                                                                   const gpu::GpuBackend& backend);

/// The devices and their prices, as `agent` and `top` meter them.
struct PricedDevices {
  std::unique_ptr<gpu::GpuBackend> backend;  ///< the opened backend (real NVML, the fake, or simulated)
  std::vector<std::optional<meter::PriceQuote>> prices;  ///< one per device, as agent_prices gives them
};
/// Opens the GPU backend and prices its devices; the error of whichever step failed.
Result<PricedDevices> open_priced_devices(const meter::PricingOptions& pricing);

/// Where owners are read from.
struct OwnerFlags {
  sys::OwnerOptions owners;  ///< --proc-root, --pod-log-root, --container-log-root
  std::string pod_resources_socket =
      kubelet::kDefaultPodResourcesSocket;  ///< --pod-resources-socket ("" disables)
};

/// Adds the owner-source flags of `agent` and `top` to `app`.
void add_owner_flags(CLI::App& app, OwnerFlags& flags);

/// The --interval flag in milliseconds (at least 10 ms), or a usage error naming the flag.
Result<std::int64_t> parse_interval_flag(const std::string& text);

/// The kubelet pod-resources reader behind --pod-resources-socket; cache() is nullptr when the flag is "".
class PodResourcesSetup {
 public:
  /// `socket_path` "" disables reading; the clock must outlive this object.
  PodResourcesSetup(const std::string& socket_path, util::Clock& clock);
  /// The cache to hand to the collector (nullptr when disabled).
  kubelet::PodResourcesCache* cache() { return cache_.get(); }

 private:
  std::unique_ptr<kubelet::KubeletPodResources> source_;
  std::unique_ptr<kubelet::PodResourcesCache> cache_;
};

}  // namespace gm::cli
