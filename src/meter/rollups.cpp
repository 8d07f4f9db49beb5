// The per-minute rollups of a run's samples.
#include <algorithm>

#include "meter/run_meter.h"

namespace gm::meter {

void RollupBook::add(const store::SampleRecord& s, std::int64_t minute) {
  const auto key = std::make_pair(minute, s.gpu_index);
  store::RollupRecord& r = rows_[key];
  r.run_id = s.run_id;
  r.minute_unix = minute;
  r.gpu_index = s.gpu_index;
  ++r.samples;
  r.utilization_sum_pct += s.utilization_pct.value_or(0);
  if (s.memory_used_bytes)
    r.memory_max_bytes = std::max(r.memory_max_bytes, static_cast<double>(*s.memory_used_bytes));
  r.energy_j += s.energy_j;
  r.cost_micros += s.cost_micros;
  dirty_.insert(key);
}

std::vector<store::RollupRecord> RollupBook::take_changed(std::int64_t current_minute) {
  std::vector<store::RollupRecord> out;
  for (const auto& k : dirty_) out.push_back(rows_[k]);
  dirty_.clear();
  for (auto it = rows_.begin(); it != rows_.end();)
    it = it->first.first < current_minute ? rows_.erase(it) : std::next(it);
  return out;
}

}  // namespace gm::meter
