// libFuzzer target: progress datagrams (DESIGN §5) come from any process of the job; a bad one is an error,
// never a crash, a negative count or a non-finite metric.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "guard/guard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = gm::guard::parse_progress_message(text);
  if (!r) {
    check(!r.error().message.empty());
    return 0;
  }
  for (const auto& v : {r->step, r->total_steps, r->samples, r->tokens}) check(!v || *v >= 0);
  for (const auto& [k, v] : r->metrics) check(std::isfinite(v));
  // The forecaster takes what the parser lets through.
  gm::meter::Forecaster f;
  double t = 0;
  const std::int64_t base = std::min<std::int64_t>(r->step.value_or(0), INT64_MAX - 16);
  for (int i = 0; i < 8; ++i) {
    if (r->step) f.add(t, base + i, r->total_steps);
    t += 1.0;
  }
  if (auto fc = f.forecast(t, 1.0, 0.001)) check(!std::isnan(fc->total_usd));
  return 0;
}
