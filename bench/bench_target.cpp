// The cost of one --target forecast (the supervisor makes one a second): the fits, the plausible set, the
// interval's bootstrap, for a curve of N points reported every step (binned above 240 points).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include "meter/target.h"

namespace {

void BM_TargetForecast(benchmark::State& state) {
  const auto n = static_cast<int>(state.range(0));
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0, 0.02);
  std::vector<gm::meter::CurvePoint> points;
  for (int s = 1; s <= n; ++s) points.push_back({double(s), 2.0 + 3.0 / std::sqrt(s + 20.0) + noise(rng)});
  gm::meter::Forecaster pace;
  for (int s = 1; s <= n; ++s) pace.add(s * 0.1, s, 2 * n);
  gm::meter::TargetInputs in;
  in.now_s = n * 0.1;
  in.step = n;
  in.total_steps = 2 * n;
  in.spent_usd = in.now_s * 0.01;
  in.burn_usd_per_s = 0.01;
  in.pace = pace.forecast(in.now_s, in.spent_usd, in.burn_usd_per_s);
  const gm::meter::MetricTarget target{"loss", true, 2.0 + 3.0 / std::sqrt(1.5 * n + 20.0)};
  for (auto _ : state) benchmark::DoNotOptimize(gm::meter::forecast_target(target, points, in));
}
BENCHMARK(BM_TargetForecast)->Arg(50)->Arg(240)->Arg(5000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
