// libFuzzer target: the Prometheus text parser and the engine readers must never crash or hang on any input
// (a serving engine's /metrics is untrusted), and what they accept must be well formed.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serving/serving.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto e = gm::serving::parse_exposition(text);
  if (!e) {
    if (e.error().message.rfind("line ", 0) != 0) std::abort();  // every error names its line
    return 0;
  }
  for (const auto& s : e->samples) {
    if (s.name.empty()) std::abort();
    for (const auto& [k, v] : s.labels)
      if (k.empty()) std::abort();
  }
  auto r = gm::serving::read_engine(*e, "default");
  if (r)
    for (const auto& [model, m] : r->models)
      for (const auto& v : {m.prompt_tokens, m.generated_tokens, m.cached_tokens, m.requests})
        if (v && (!(*v >= 0) || std::isnan(*v))) std::abort();  // counters are never negative or NaN
  return 0;
}
