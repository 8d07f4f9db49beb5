// libFuzzer target: the Prometheus HTTP API answers `report --prometheus` parses. The input is up to eight
// answers separated by NUL bytes, given in turn to the fleet report's queries (the first byte picks --by).
// Any answers: an error, or a report of finite numbers, sorted most expensive first.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "report/fleet.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  if (size == 0) return 0;
  static const char* const kBy[] = {"namespace", "job", "user", "gpu"};
  const std::string by = kBy[data[0] % 4];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string> answers;
  std::size_t start = 0;
  while (true) {
    const auto nul = text.find('\0', start);
    answers.emplace_back(
        text.substr(start, nul == std::string_view::npos ? std::string_view::npos : nul - start));
    if (nul == std::string_view::npos) break;
    start = nul + 1;
  }
  std::size_t asked = 0;
  const gm::report::PrometheusQuery query =
      [&](const std::string&) -> gm::util::Result<gm::report::PrometheusAnswer> {
    return gm::report::PrometheusAnswer{200, answers[asked++ % answers.size()]};
  };
  auto rep = gm::report::fleet_report_from(query, "http://fuzz:9090", 3'600'000, by);
  if (!rep) {
    check(!rep.error().message.empty());
    return 0;
  }
  for (double v : {rep->device_cost_usd, rep->owner_cost_usd, rep->unallocated_cost_usd, rep->idle_cost_usd})
    check(std::isfinite(v));
  if (rep->idle_held_cost_usd) check(std::isfinite(*rep->idle_held_cost_usd));
  for (std::size_t i = 0; i < rep->rows.size(); ++i) {
    const auto& r = rep->rows[i];
    check(!std::isnan(r.cost_usd));
    if (r.energy_j) check(!std::isnan(*r.energy_j));
    if (r.gpu_seconds) check(!std::isnan(*r.gpu_seconds));
    if (i > 0) check(rep->rows[i - 1].cost_usd >= r.cost_usd);
  }
  return 0;
}
