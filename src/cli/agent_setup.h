#pragma once
// Shared by `agent` and `top`: price of every device from the pricing flags, and the kubelet
// pod-resources reader.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu.h"
#include "kubelet/pod_resources.h"
#include "meter/meter.h"
#include "util/result.h"

namespace gm::cli {

/// Price per device (nullopt for a GPU with no known price); error when explicit pricing flags fail.
Result<std::vector<std::optional<PriceQuote>>> agent_prices(const PricingOptions& pricing, const GpuBackend& backend);

/// The kubelet pod-resources reader behind --pod-resources-socket; cache() is nullptr when the flag is "".
class PodResourcesSetup {
 public:
  /// `socket_path` "" disables reading; the clock must outlive this object.
  PodResourcesSetup(const std::string& socket_path, Clock& clock);
  /// The cache to hand to the collector (nullptr when disabled).
  PodResourcesCache* cache() { return cache_.get(); }

 private:
  std::unique_ptr<KubeletPodResources> source_;
  std::unique_ptr<PodResourcesCache> cache_;
};

}  // namespace gm::cli
