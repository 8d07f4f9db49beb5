// The dollar rules other modules ask for: burn rates, shares, waste, MIG prices, per-unit figures. Every
// computation on an amount of money outside src/meter goes through one of these (scripts/check_money.py).
#include <algorithm>
#include <cmath>

#include "meter/meter.h"
#include "meter/run_meter.h"

namespace gm::meter {

double burn_usd_per_s(MicroUsd micros_per_gpu_hour, std::size_t gpus) {
  return util::micros_to_usd(micros_per_gpu_hour) * static_cast<double>(gpus) / 3600.0;
}

double usd_per_hour_of_burn(double usd_per_s) {
  return usd_per_s * 3600.0;
}

double usd_per_s_of_hourly(double usd_per_hour) {
  return usd_per_hour / 3600;
}

double usd_over_ms(double usd_per_s, double ms) {
  return usd_per_s * ms / 1000.0;
}

double usd_per_hour_of_gpus(MicroUsd micros_per_gpu_hour, double gpus) {
  return util::micros_to_usd(micros_per_gpu_hour) * gpus;
}

MicroUsd micros_times(MicroUsd amount, std::int64_t count) {
  return amount * count;
}

std::optional<MigShare> mig_share(const gpu::MigInstance& m,
                                  std::optional<std::uint64_t> board_memory_bytes) {
  if (m.slice_count && m.board_slices && *m.board_slices > 0)
    return MigShare{*m.slice_count, *m.board_slices};
  if (m.memory_total_bytes && board_memory_bytes && *board_memory_bytes > 0)
    return MigShare{*m.memory_total_bytes, *board_memory_bytes};
  return std::nullopt;
}

MicroUsd share_of_micros(MicroUsd amount, std::uint64_t num, std::uint64_t den) {
  return static_cast<MicroUsd>(static_cast<util::Int128>(amount) * num / den);
}

std::optional<MicroUsd> mig_micros_per_hour(MicroUsd board_micros_per_hour, const gpu::MigInstance& m,
                                            std::optional<std::uint64_t> board_memory_bytes) {
  const auto share = mig_share(m, board_memory_bytes);
  if (!share) return std::nullopt;
  return share_of_micros(board_micros_per_hour, share->num, share->den);
}

std::vector<MicroUsd> split_equally(MicroUsd total, std::size_t parts) {
  return split_micros(total, std::vector<std::uint64_t>(parts, 0));
}

MicroUsd idle_part_micros(MicroUsd cost, std::uint32_t utilization_pct) {
  return cost * (100 - std::min<std::uint32_t>(utilization_pct, 100)) / 100;
}

MicroUsd attributed_micros(MicroUsd device_cost, MicroUsd unallocated) {
  return device_cost - unallocated;
}

double usd_per_hour_of_instances(double usd_per_instance_hour, double instances) {
  return usd_per_instance_hour * instances;
}

MicroUsd waste_micros(MicroUsd idle_cost, MicroUsd unused_gpu_cost) {
  return idle_cost + unused_gpu_cost;
}

MicroUsd idle_after_startup_micros(MicroUsd idle_cost, MicroUsd startup_cost) {
  return std::max<MicroUsd>(0, idle_cost - startup_cost);
}

MicroUsd busy_micros(MicroUsd cost, MicroUsd not_busy) {
  return std::max<MicroUsd>(0, cost - not_busy);
}

MicroUsd cost_between_micros(MicroUsd at_end, MicroUsd at_start) {
  return at_end - at_start;
}

MicroUsd combined_spend_micros(MicroUsd own, MicroUsd others) {
  return own + others;
}

bool share_over(MicroUsd part, MicroUsd whole, std::int64_t times) {
  return static_cast<util::Int128>(part) * times > whole;
}

bool share_under(MicroUsd part, MicroUsd whole, std::int64_t times) {
  return static_cast<util::Int128>(part) * times < whole;
}

double cost_share(MicroUsd part, MicroUsd whole) {
  return static_cast<double>(part) / static_cast<double>(whole);
}

double cost_share_pct(MicroUsd part, MicroUsd whole) {
  return 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

double usd_share_pct(double part_usd, double whole_usd) {
  return 100.0 * part_usd / whole_usd;
}

double in_cost_share(double x, MicroUsd part, MicroUsd whole) {
  return x * static_cast<double>(part) / static_cast<double>(whole);
}

MicroUsd part_of_micros(MicroUsd amount, double fraction1, double fraction2) {
  return static_cast<MicroUsd>(static_cast<double>(amount) * fraction1 * fraction2);
}

double usd_ratio(double a_usd, double b_usd) {
  return a_usd / b_usd;
}

double usd_gap(double a_usd, double b_usd) {
  return std::fabs(a_usd - b_usd);
}

bool cost_within_increase(MicroUsd before, MicroUsd after, double limit_pct) {
  // B ≤ A × (1 + limit/100), with a micro-dollar of slack for the product's rounding.
  const double allowed = static_cast<double>(before) * (1.0 + limit_pct / 100.0);
  return static_cast<double>(after) <= allowed + 1e-6;
}

MicroUsd projected_total_micros(MicroUsd startup, MicroUsd cost, std::int64_t steps,
                                std::int64_t total_steps) {
  const MicroUsd per_steps = cost - startup;
  return startup + static_cast<MicroUsd>(static_cast<util::Int128>(per_steps) * total_steps / steps);
}

double usd_per(double usd, double units, double per) {
  return usd / units * per;
}

double usd_per_1k(double usd, double count) {
  return usd_per(usd, count, 1000);
}

double usd_per_million(double usd, double units) {
  return usd_per(usd, units, 1e6);
}

double usd_for_units(double usd_per_unit, double units) {
  return usd_per_unit * units;
}

double usd_for_hours(double usd_per_hour, double hours) {
  return usd_per_hour * hours;
}

util::NanoUsd priced_sum_nanos(const std::vector<std::pair<util::NanoUsd, double>>& unit_and_quantity) {
  util::Int128 sum = 0;
  for (const auto& [unit, quantity] : unit_and_quantity)
    sum += static_cast<util::Int128>(unit) * std::llround(quantity * 1000);
  return static_cast<util::NanoUsd>(sum / 1000);
}

bool moved_over_half(util::NanoUsd before, util::NanoUsd after) {
  const util::Int128 diff =
      after > before ? static_cast<util::Int128>(after) - before : static_cast<util::Int128>(before) - after;
  return diff * 2 > static_cast<util::Int128>(before);
}

std::int64_t change_per_mille(util::NanoUsd before, util::NanoUsd after) {
  return static_cast<std::int64_t>((static_cast<util::Int128>(after) - before) * 1000 / before);
}

util::NanoUsd gpu_ns_cost_nano_usd(MicroUsd price_micros_per_gpu_hour, std::int64_t ns) {
  return gpu_ns_cost_pico_usd(price_micros_per_gpu_hour, ns) / 1000;
}

std::optional<util::NanoUsd> nano_usd_per_month_of_share(MicroUsd price_micros_per_gpu_hour,
                                                         std::int64_t part_ns, std::int64_t window_ns) {
  if (window_ns <= 0) return std::nullopt;
  // share of the window × price × 730 h, in integers: micros/h × 730 h × 1000 nano/micro × part / window.
  constexpr std::int64_t kHoursPerMonth = 730;
  const util::Int128 n = static_cast<util::Int128>(price_micros_per_gpu_hour) *
                         static_cast<util::Int128>(kHoursPerMonth) * 1000 * part_ns;
  return static_cast<util::NanoUsd>(n / window_ns);
}

std::optional<std::pair<double, double>> forecast_spread_usd(const Forecast& f) {
  if (f.high_usd <= f.low_usd) return std::nullopt;
  return std::make_pair(std::max(0.0, f.total_usd - f.low_usd), std::max(0.0, f.high_usd - f.total_usd));
}

std::pair<double, double> forecast_band_usd(double total_usd, const std::pair<double, double>& spread) {
  return {total_usd - spread.first, total_usd + spread.second};
}

}  // namespace gm::meter
