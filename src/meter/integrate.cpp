// Exact cost integration, shared-device attribution, energy and carbon.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "meter/meter.h"

namespace gm::meter {

namespace {
constexpr std::int64_t kNsPerHour = 3'600'000'000'000;
}

MicroUsd CostIntegrator::add_ns(std::int64_t duration_ns) {
  if (duration_ns <= 0) return 0;
  const util::Int128 num = static_cast<util::Int128>(price_) * duration_ns + remainder_;
  const auto q = static_cast<MicroUsd>(num / kNsPerHour);
  remainder_ = num % kNsPerHour;
  total_ += q;
  total_ns_ += duration_ns;
  return q;
}

std::vector<MicroUsd> split_micros(MicroUsd total, const std::vector<std::uint64_t>& weights) {
  std::vector<MicroUsd> out(weights.size(), 0);
  if (weights.empty()) return out;
  util::Int128 sum = 0;
  for (std::uint64_t w : weights) sum += w;
  const bool equal = sum == 0;
  if (equal) sum = static_cast<util::Int128>(weights.size());
  std::vector<std::pair<util::Int128, std::size_t>> rem;
  MicroUsd given = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const util::Int128 num =
        static_cast<util::Int128>(total) * (equal ? 1 : static_cast<util::Int128>(weights[i]));
    out[i] = static_cast<MicroUsd>(num / sum);
    rem.emplace_back(num % sum, i);
    given += out[i];
  }
  std::stable_sort(rem.begin(), rem.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (std::size_t k = 0; given < total && k < rem.size(); ++k, ++given) ++out[rem[k].second];
  return out;
}

Attribution attribute(MicroUsd device_cost, double energy_j, const gpu::DeviceSample& sample) {
  Attribution a;
  a.device_cost = device_cost;
  const auto& procs = sample.processes;
  if (procs.empty()) {
    a.unallocated = device_cost;
    return a;
  }
  // Integer weights: SM percent when any process has a non-zero SM sample, else memory bytes, else equal.
  std::vector<std::uint64_t> w(procs.size(), 0);
  for (std::size_t i = 0; i < procs.size(); ++i)
    if (procs[i].sm_util_pct && *procs[i].sm_util_pct > 0) {
      w[i] = *procs[i].sm_util_pct;
      a.by_sm = true;
    }
  if (!a.by_sm)
    for (std::size_t i = 0; i < procs.size(); ++i) w[i] = procs[i].memory_bytes.value_or(0);
  std::uint64_t total = std::accumulate(w.begin(), w.end(), std::uint64_t{0});
  if (total == 0) {
    std::fill(w.begin(), w.end(), 1);
    total = w.size();
  }
  const std::vector<MicroUsd> cost = split_micros(device_cost, w);
  const std::optional<std::uint32_t> util = sample.utilization_pct;
  for (std::size_t i = 0; i < procs.size(); ++i) {
    ProcessShare s;
    s.pid = procs[i].pid;
    s.cost = cost[i];
    s.weight = static_cast<double>(w[i]) / static_cast<double>(total);
    s.energy_j = energy_j * s.weight;
    if (util) s.idle_cost = idle_part_micros(cost[i], *util);
    a.shares.push_back(s);
  }
  return a;
}

double EnergyMeter::add(const gpu::DeviceSample& sample) {
  double joules = 0;
  if (prev_ && sample.t_ns > prev_->t_ns) {
    const double dt_s = static_cast<double>(sample.t_ns - prev_->t_ns) / 1e9;
    bool done = false;
    if (prev_->energy_mj && sample.energy_mj) {
      if (*sample.energy_mj >= *prev_->energy_mj) {
        joules = static_cast<double>(*sample.energy_mj - *prev_->energy_mj) / 1000.0;
        ++counter_intervals_;
        done = true;
      } else {
        ++resets_;  // driver reload: the counter restarted; never subtract
      }
    }
    if (!done && prev_->power_mw && sample.power_mw) {
      joules = (static_cast<double>(*prev_->power_mw) + static_cast<double>(*sample.power_mw)) / 2.0 /
               1000.0 * dt_s;
      ++power_intervals_;
    }
  }
  if (sample.t_ns >= (prev_ ? prev_->t_ns : sample.t_ns)) prev_ = sample;
  total_j_ += joules;
  return joules;
}

gpu::EnergyMethod EnergyMeter::method() const {
  if (power_intervals_ > 0) return gpu::EnergyMethod::power_integration;
  if (counter_intervals_ > 0) return gpu::EnergyMethod::counter;
  return gpu::EnergyMethod::none;
}

std::optional<CarbonEstimate> estimate_carbon(double energy_kwh, const catalog::Catalog& catalog,
                                              const std::string& provider, const std::string& region,
                                              std::optional<double> g_per_kwh_override,
                                              std::optional<double> pue_override) {
  CarbonEstimate e;
  if (g_per_kwh_override) {
    e.g_per_kwh = *g_per_kwh_override;
    e.intensity_source = "--carbon-intensity";
  } else if (const catalog::CarbonIntensity* c = catalog.carbon_for(provider, region)) {
    e.g_per_kwh = c->g_co2e_per_kwh;
    e.intensity_source = c->dataset + " " + c->provider + "/" + c->region + " (" + c->source + ")";
  } else {
    return std::nullopt;
  }
  if (pue_override) {
    e.pue = *pue_override;
    e.pue_source = "--pue";
  } else if (auto p = catalog.pue_for(provider, region)) {
    e.pue = p->pue;
    e.pue_source = p->provider + "/" + p->region + " (" + p->source + ")";
  } else {
    e.pue = 1.0;
    e.pue_source = "no PUE known: 1.0 assumed";
  }
  e.co2_kg = energy_kwh * e.pue * e.g_per_kwh / 1000.0;
  return e;
}

std::int64_t gpu_ns_cost_pico_usd(MicroUsd price_micros_per_gpu_hour, std::int64_t ns) {
  // micro-dollars/hour × ns × (1e6 pico per micro) / (3.6e12 ns per hour) = micros × ns / 3.6e6.
  const util::Int128 p = static_cast<util::Int128>(price_micros_per_gpu_hour) * ns;
  const util::Int128 q = (p >= 0 ? p + 1'800'000 : p - 1'800'000) / 3'600'000;
  const util::Int128 max = std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(q > max ? max : (q < -max ? -max : q));
}

double gpu_ns_cost_usd(MicroUsd price_micros_per_gpu_hour, double ns) {
  const auto pico =
      gpu_ns_cost_pico_usd(price_micros_per_gpu_hour, static_cast<std::int64_t>(std::llround(ns)));
  return static_cast<double>(pico) / 1e12;
}

MicroUsd scale_micros(MicroUsd amount, double fraction) {
  return static_cast<MicroUsd>(std::llround(static_cast<double>(amount) * fraction));
}

MicroUsd micros_per_hour(MicroUsd cost, std::int64_t interval_ns) {
  if (interval_ns <= 0) return 0;
  const util::Int128 p = static_cast<util::Int128>(cost) * 3'600'000'000'000LL;
  return static_cast<MicroUsd>((p + interval_ns / 2) / interval_ns);
}

MicroUsd budget_left_micros(MicroUsd budget, MicroUsd spent) {
  return budget - spent;
}

MicroUsd forecast_over_budget_micros(double forecast_usd, MicroUsd budget) {
  return util::usd_to_micros(forecast_usd) - budget;
}

std::optional<double> usd_per_units(MicroUsd cost, std::optional<double> units, double per) {
  if (!units || !(*units > 0)) return std::nullopt;
  return util::micros_to_usd(cost) * per / *units;
}

namespace {
constexpr std::int64_t kSecondsPerMonth = 730 * 3600;
}

std::optional<std::int64_t> nano_usd_per_month(MicroUsd cost, std::int64_t over_ms) {
  if (over_ms <= 0) return std::nullopt;
  return static_cast<std::int64_t>(static_cast<util::Int128>(cost) * 1000 * kSecondsPerMonth * 1000 /
                                   over_ms);
}

std::int64_t nano_usd_per_month_at(MicroUsd micros_per_hour) {
  return micros_per_hour * 1000 * 730;
}

std::optional<std::int64_t> nano_usd_per_1k(MicroUsd cost, std::int64_t count) {
  if (count <= 0) return std::nullopt;
  return cost * 1000 * 1000 / count;
}

}  // namespace gm::meter
