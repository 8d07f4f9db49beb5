#pragma once
// Internal to meter: the median shared by the curve fits and the target forecast.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace gm::meter {

/// The median of `v` (the mean of the two middle values for an even count); 0 for none.
inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  double m = *mid;
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), mid)) / 2;
  return m;
}

}  // namespace gm::meter
