// libFuzzer target: the kubelet /pods PodList reader of `agent --inference-discover` must never crash on any
// input (the kubelet's answer is outside input), and every target it returns is a URL the endpoint parser
// accepts with an owner.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serving/serving.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto targets = gm::serving::parse_kubelet_pods(text, "kubelet");
  if (!targets) {
    if (targets.error().message.rfind("kubelet: ", 0) != 0) std::abort();  // errors name the source
    return 0;
  }
  if ((targets->malformed == 0) != targets->problem.empty()) std::abort();  // a skipped pod is named
  for (const auto& t : targets->targets) {
    if (t.owner.empty()) std::abort();
    // A URL built from annotations either parses as an endpoint or is skipped by the discovery; never UB.
    (void)gm::serving::parse_inference_endpoint(t.url + ",owner=" + t.owner, "annotation");
  }
  return 0;
}
