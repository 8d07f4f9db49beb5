#pragma once
// The meter: price resolution (DESIGN §3 order, source kept), billing rules, exact per-interval cost
// integration in micro-dollars, shared-device attribution, energy and carbon.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "gpu/gpu.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::meter {

// ---- price resolution ------------------------------------------------------------------------

/// Where a price came from.
enum class PriceOrigin { flag_price, flag_offer, config_file, detected_instance, catalog_reference, none };

/// Pricing options as given on the command line (shared by run, agent, trace, gpus).
struct PricingOptions {
  std::optional<double> price_usd_per_gpu_hour;  ///< --price
  std::optional<std::string> offer;              ///< --offer provider:instance[:spot]
  std::optional<std::string> config_path;  ///< --config (TOML), else $XDG_CONFIG_HOME/gpumeter/config.toml
  std::optional<std::string> catalog_override;  ///< --catalog FILE (offers override CSV)
};

/// A resolved price for one GPU-second, with where it came from.
struct PriceQuote {
  MicroUsd micros_per_gpu_hour = 0;
  PriceOrigin origin = PriceOrigin::none;
  std::string
      source;  ///< human text: "--price", "offer aws:p5.48xlarge (us-east-1, on-demand, skypilot-catalog@...,
               ///< 2025-..)", "catalog reference: median of 12 H100 SXM 80GB offers"
  std::string provider;  ///< for the billing rule and carbon ("" when unknown)
  std::string region;
  bool spot = false;
  catalog::BillingRule billing;  ///< rule applied to runs at this price
  /// $/GPU-hour as a double for display.
  double usd_per_gpu_hour() const { return util::micros_to_usd(micros_per_gpu_hour); }
};

/// Reads the cloud instance type from DMI (/sys/class/dmi/id) or metadata files; a seam for tests.
class InstanceDetector {
 public:
  virtual ~InstanceDetector() = default;
  /// Instance type ("p5.48xlarge") if this machine looks like a known cloud VM.
  virtual std::optional<std::string> instance_type() const = 0;
};

/// DMI-based detection under `sys_root` (default "/sys").
class DmiInstanceDetector final : public InstanceDetector {
 public:
  explicit DmiInstanceDetector(std::string sys_root = "/sys") : sys_root_(std::move(sys_root)) {}
  std::optional<std::string> instance_type() const override;

 private:
  std::string sys_root_;
};

/// $XDG_CONFIG_HOME/gpumeter/config.toml (or ~/.config/...) when that file exists.
std::optional<std::string> default_config_path();

/// Your own rates from `[pricing]` in the config file: discounts per provider, committed-use / reserved rates
/// per instance, an on-premises $/GPU-hour.
struct ContractRates {
  std::map<std::string, std::int64_t>
      discount_ppm;  ///< provider ("*" = every provider) -> parts per million off
  std::map<std::string, double> committed_usd_per_hour;  ///< "provider:instance" -> $/h of the whole instance
  std::optional<double> onprem_usd_per_gpu_hour;         ///< your own machines
  std::string origin;                                    ///< the config file
  /// True when no rate is set.
  bool empty() const {
    return discount_ppm.empty() && committed_usd_per_hour.empty() && !onprem_usd_per_gpu_hour;
  }
};

/// Reads the rates from the config file at `config_path` (the explicit one, else default_config_path(); none:
/// no rates). Error (usage) naming the file and key for a bad value (a discount of 100 % or more, a rate <=
/// 0).
Result<ContractRates> load_contract_rates(const std::optional<std::string>& config_path);

/// What you pay per GPU-hour for an offer under your rates, and why.
struct YourPrice {
  MicroUsd micros_per_gpu_hour = 0;
  std::string basis;  ///< "committed rate (config FILE)", "30% aws discount (config FILE)"
  double usd_per_gpu_hour() const { return util::micros_to_usd(micros_per_gpu_hour); }
};

/// Your price for `offer` (on-demand, or spot): a committed rate for its instance replaces the on-demand
/// list price; otherwise the provider's discount (or the "*" one) applies to the list price. nullopt when no
/// rate applies or the offer has no such price.
std::optional<YourPrice> your_price(const catalog::Offer& offer, bool spot, const ContractRates& rates);

/// Resolves the price per GPU-hour in the order: --price > --offer > config file > detected instance >
/// catalog reference price of `nvml_gpu_name`. Error (usage / not_found) for a bad --offer or config.
Result<PriceQuote> resolve_price(const PricingOptions& options, const catalog::Catalog& catalog,
                                 const std::optional<std::string>& nvml_gpu_name,
                                 const InstanceDetector* detector);

/// A device's price, or why it has none.
struct DevicePrice {
  std::optional<PriceQuote> quote;  ///< nullopt: the GPU has no known price
  std::string unpriced_reason;      ///< why, when quote is nullopt
};

/// The pricing of one command (run, agent, gpus, top, trace, demo): the catalog with the --catalog override
/// merged, the instance detector and the user's pricing options; each device name is resolved once.
class PricingContext {
 public:
  /// Loads the catalog; `detector` null = no instance detection (trace files come from elsewhere).
  static Result<PricingContext> open(PricingOptions options, std::unique_ptr<InstanceDetector> detector);
  /// The price for a device named `device_name` (nullopt: no device). An error (usage) only when an explicit
  /// price (--price, --offer, --config) or a config file cannot be resolved: that is the user's mistake; a
  /// GPU the catalog cannot price is data (DevicePrice::unpriced_reason).
  Result<DevicePrice> price_for(const std::optional<std::string>& device_name);
  /// The catalog GPU of a device name (per-vendor table, then loose spelling); nullptr if unknown.
  const catalog::GpuSpec* gpu_for(std::string_view device_name, std::string_view vendor = {}) const;
  /// True when the user named a price (--price, --offer or --config).
  bool explicit_price() const;
  /// The catalog, with the --catalog override merged.
  const catalog::Catalog& catalog() const { return catalog_; }

 private:
  PricingContext(catalog::Catalog catalog, PricingOptions options,
                 std::unique_ptr<InstanceDetector> detector);
  catalog::Catalog catalog_;
  PricingOptions options_;
  std::unique_ptr<InstanceDetector> detector_;
  std::map<std::string, DevicePrice> cache_;  ///< by device name ("" for none)
};

// ---- billing and cost integration ------------------------------------------------------------

/// Cost of `ns` GPU-nanoseconds at `price_micros_per_gpu_hour` in pico-dollars (1e-12 USD), rounded to the
/// nearest: exact integers with the resolution single kernels of a trace need (a 5 µs kernel at $3/h is
/// 4.2 nano-dollars). Saturates at the int64 limit (over $9.2 million).
std::int64_t gpu_ns_cost_pico_usd(MicroUsd price_micros_per_gpu_hour, std::int64_t ns);

/// Dollars of `ns` GPU-nanoseconds (a mean or a per-step average, rounded to the nanosecond) at
/// `price_micros_per_gpu_hour`: gpu_ns_cost_pico_usd as a double, for display.
double gpu_ns_cost_usd(MicroUsd price_micros_per_gpu_hour, double ns);

// ---- money arithmetic (the only place dollar amounts are combined) ---------------------------

/// `amount` × `fraction`, rounded to the nearest micro-dollar: a warning threshold, a share, a saving.
MicroUsd scale_micros(MicroUsd amount, double fraction);
/// The hourly rate of `cost` spent over `interval_ns`, rounded to the micro-dollar (0 for no interval).
MicroUsd micros_per_hour(MicroUsd cost, std::int64_t interval_ns);
/// What is left of `budget` after `spent` (negative once overspent).
MicroUsd budget_left_micros(MicroUsd budget, MicroUsd spent);
/// How far a forecast total in dollars goes over `budget`, in micro-dollars (<= 0: within the budget).
MicroUsd forecast_over_budget_micros(double forecast_usd, MicroUsd budget);
/// Dollars per `per` units of `cost` spread over `units` (a display KPI: $ per step, per 1M tokens); nullopt
/// without units or with none counted.
std::optional<double> usd_per_units(MicroUsd cost, std::optional<double> units, double per);
/// Micro-dollars as nano-dollars (the findings' unit).
inline std::int64_t micros_to_nanos(MicroUsd micros) {
  return micros * 1000;
}
/// Nano-dollars of a month (730 h) spending `cost` per `over_ms`; nullopt when over_ms <= 0.
std::optional<std::int64_t> nano_usd_per_month(MicroUsd cost, std::int64_t over_ms);
/// Nano-dollars of a month (730 h) at `micros_per_hour`.
std::int64_t nano_usd_per_month_at(MicroUsd micros_per_hour);
/// Nano-dollars per 1000 units of `cost` spread over `count` units; nullopt when count <= 0.
std::optional<std::int64_t> nano_usd_per_1k(MicroUsd cost, std::int64_t count);

/// The burn rate of `gpus` GPUs at `micros_per_gpu_hour`, in dollars per second (forecasts and display).
double burn_usd_per_s(MicroUsd micros_per_gpu_hour, std::size_t gpus);
/// A burn rate per second as dollars per hour.
double usd_per_hour_of_burn(double usd_per_s);
/// A rate per hour as dollars per second.
double usd_per_s_of_hourly(double usd_per_hour);
/// Dollars spent over `ms` milliseconds at `usd_per_s`.
double usd_over_ms(double usd_per_s, double ms);
/// Dollars per hour of `gpus` GPUs at `micros_per_gpu_hour` (display and planning).
double usd_per_hour_of_gpus(MicroUsd micros_per_gpu_hour, double gpus);
/// `amount` × `count` (a price for several GPUs, one GPU's cost for all of them).
MicroUsd micros_times(MicroUsd amount, std::int64_t count);

/// The share of a board's price a MIG instance is charged: its slices of the board's slices, else its memory
/// of the board's memory; nullopt when neither size is known.
struct MigShare {
  std::uint64_t num = 0;
  std::uint64_t den = 1;
};
std::optional<MigShare> mig_share(const gpu::MigInstance& instance,
                                  std::optional<std::uint64_t> board_memory_bytes);
/// `amount` × num / den, floor-rounded, exact (128-bit product).
MicroUsd share_of_micros(MicroUsd amount, std::uint64_t num, std::uint64_t den);
/// A MIG instance's price per hour from its board's (mig_share; slices: the board price × slices / board
/// slices, floor); nullopt when the instance's size is unknown.
std::optional<MicroUsd> mig_micros_per_hour(MicroUsd board_micros_per_hour, const gpu::MigInstance& instance,
                                            std::optional<std::uint64_t> board_memory_bytes);
/// `total` split equally over `parts` (split_micros with equal weights: the remainder to the first parts).
std::vector<MicroUsd> split_equally(MicroUsd total, std::size_t parts);

/// The idle part of `cost` on a device at `utilization_pct` (capped at 100): cost × (100 − util) / 100,
/// floor.
MicroUsd idle_part_micros(MicroUsd cost, std::uint32_t utilization_pct);
/// What of a device's cost went to its holders: `device_cost` less its `unallocated` part.
MicroUsd attributed_micros(MicroUsd device_cost, MicroUsd unallocated);
/// Dollars per hour of `instances` instances at `usd_per_instance_hour` (planning).
double usd_per_hour_of_instances(double usd_per_instance_hour, double instances);
/// The waste of a run or fleet: idle time on used GPUs plus allocated GPUs never used.
MicroUsd waste_micros(MicroUsd idle_cost, MicroUsd unused_gpu_cost);
/// The idle cost of a run after its start-up: `idle_cost` less the start-up's cost on the same GPUs
/// (`startup_cost`), never below 0.
MicroUsd idle_after_startup_micros(MicroUsd idle_cost, MicroUsd startup_cost);
/// What was spent busy: `cost` less `not_busy` (idle and unused), never below 0.
MicroUsd busy_micros(MicroUsd cost, MicroUsd not_busy);
/// The cost between two cumulative readings (`at_end` − `at_start`).
MicroUsd cost_between_micros(MicroUsd at_end, MicroUsd at_start);
/// What a run and the other runs of its team spent together.
MicroUsd combined_spend_micros(MicroUsd own, MicroUsd others);
/// True when `part` × `times` > `whole` (a share over 1/`times`, exactly).
bool share_over(MicroUsd part, MicroUsd whole, std::int64_t times);
/// True when `part` × `times` < `whole` (a share under 1/`times`, exactly).
bool share_under(MicroUsd part, MicroUsd whole, std::int64_t times);
/// part / whole as a double (display, severities); `whole` must be non-zero.
double cost_share(MicroUsd part, MicroUsd whole);
/// 100 × part / whole (a percentage for display); `whole` must be non-zero.
double cost_share_pct(MicroUsd part, MicroUsd whole);
/// 100 × part / whole of dollar figures (a percentage for display); `whole` must be non-zero.
double usd_share_pct(double part_usd, double whole_usd);
/// `x` × part / whole: a quantity (time, energy) in proportion to a cost's share; `whole` must be non-zero.
double in_cost_share(double x, MicroUsd part, MicroUsd whole);
/// `amount` × fraction1 × fraction2, truncated toward zero (a finding's part of the busy cost).
MicroUsd part_of_micros(MicroUsd amount, double fraction1, double fraction2 = 1.0);
/// a / b of two dollar figures (a price or cost ratio); `b` must be non-zero.
double usd_ratio(double a_usd, double b_usd);
/// |a − b| of two dollar figures.
double usd_gap(double a_usd, double b_usd);
/// True when `after` is within `limit_pct` % above `before` (the release gate's cost rule).
bool cost_within_increase(MicroUsd before, MicroUsd after, double limit_pct);
/// A run's total from its start-up cost and its cost so far, projecting the steps after start-up at the
/// same cost per step: startup + (cost − startup) × total_steps / steps (floor). `steps` must be > 0.
MicroUsd projected_total_micros(MicroUsd startup, MicroUsd cost, std::int64_t steps,
                                std::int64_t total_steps);
/// Dollars per `per` units of `usd` spread over `units` units (usd / units × per); `units` must be non-zero.
double usd_per(double usd, double units, double per);
/// Dollars per 1000 units of `usd` spread over `count` units; `count` must be non-zero.
double usd_per_1k(double usd, double count);
/// Dollars per million units (tokens) of `usd` spread over `units`.
double usd_per_million(double usd, double units);
/// Dollars of `units` units (steps) at `usd_per_unit`.
double usd_for_units(double usd_per_unit, double units);
/// Dollars of `hours` at `usd_per_hour` (planning).
double usd_for_hours(double usd_per_hour, double hours);
/// Nano-dollars of whole dollars (severity thresholds).
constexpr util::NanoUsd nanos_of_usd(std::int64_t usd) {
  return usd * util::kNanosPerUsd;
}
/// Σ unit price × quantity in nano-dollars (an instance priced from its GPU, core and memory SKUs), exact:
/// quantities in thousandths, so fractional GPUs or GiB stay exact; the sum truncated to the nano-dollar.
util::NanoUsd priced_sum_nanos(const std::vector<std::pair<util::NanoUsd, double>>& unit_and_quantity);
/// True when `after` is more than 50 % away from `before` (> 0), exactly: |after − before| × 2 > before (the
/// sanity rule of `prices update`).
bool moved_over_half(util::NanoUsd before, util::NanoUsd after);
/// The change from `before` (non-zero) to `after` in per mille, truncated toward zero.
std::int64_t change_per_mille(util::NanoUsd before, util::NanoUsd after);
/// Cost of `ns` GPU-nanoseconds in nano-dollars (gpu_ns_cost_pico_usd truncated to the nano-dollar).
util::NanoUsd gpu_ns_cost_nano_usd(MicroUsd price_micros_per_gpu_hour, std::int64_t ns);
/// Nano-dollars of a month (730 h) of a GPU busy `part_ns` of every `window_ns` at the price; nullopt when
/// window_ns <= 0.
std::optional<util::NanoUsd> nano_usd_per_month_of_share(MicroUsd price_micros_per_gpu_hour,
                                                         std::int64_t part_ns, std::int64_t window_ns);

/// billed_s = max(ceil(wall_ms / 1000 / granularity) * granularity, minimum_s); 0 wall => minimum.
std::int64_t billed_seconds(std::int64_t wall_ms, const catalog::BillingRule& rule);
/// Cost of `gpus` GPUs for `billed_s` seconds at `price`: exact integer arithmetic.
MicroUsd billed_cost(const PriceQuote& price, std::int64_t billed_s, unsigned gpus);

/// Integrates cost over irregular intervals exactly: the sum over intervals equals the cost of the
/// summed duration (the sub-micro-dollar remainder is carried, never lost or doubled).
class CostIntegrator {
 public:
  explicit CostIntegrator(MicroUsd micros_per_hour = 0) : price_(micros_per_hour) {}
  /// Adds `duration_ns` and returns the micro-dollars this interval adds.
  MicroUsd add_ns(std::int64_t duration_ns);
  /// Total micro-dollars so far.
  MicroUsd total() const { return total_; }
  /// Total duration so far.
  std::int64_t total_ns() const { return total_ns_; }
  /// Changes the price for the following intervals.
  void set_price(MicroUsd micros_per_hour) { price_ = micros_per_hour; }

 private:
  MicroUsd price_;
  MicroUsd total_ = 0;
  std::int64_t total_ns_ = 0;
  util::Int128 remainder_ = 0;  // in micro-dollar * ns units / 3.6e12
};

// ---- own hardware against the cloud ----------------------------------------------------------

/// Own hardware vs cloud over a number of years.
struct TcoInput {
  std::string gpu;
  int gpus = 8;
  double years = 3;
  double capex_usd = 0;               ///< purchase of the whole system
  double gpu_power_w = 0;             ///< per GPU at full load (TDP by default)
  double idle_power_fraction = 0.25;  ///< idle draw as a fraction of full load
  double host_power_w = 0;            ///< CPU, memory, network of the system at load
  double pue = 1.4;
  double usd_per_kwh = 0.12;
  double ops_usd_per_year = 0;  ///< staff, space, support contracts
  double utilization = 0.6;     ///< fraction of hours the GPUs do useful work
  double cloud_usd_per_gpu_hour = 0;
  std::string cloud_source;  ///< where the cloud price came from
};
struct TcoResult {
  double hours = 0;
  double own_energy_kwh = 0;
  double own_energy_usd = 0;
  double own_ops_usd = 0;
  double own_total_usd = 0;
  double cloud_gpu_hours = 0;
  double cloud_total_usd = 0;
  double own_usd_per_used_gpu_hour = 0;
  std::optional<double> break_even_utilization;  ///< none when cloud is cheaper even at 100 %
};
/// Validates inputs (positive sizes, utilization in (0,1]) and computes both sides.
Result<TcoResult> compute_tco(const TcoInput& in);

// ---- attribution on a shared device ----------------------------------------------------------

/// One process's share of a device interval.
struct ProcessShare {
  std::uint32_t pid = 0;
  MicroUsd cost = 0;
  MicroUsd idle_cost = 0;  ///< cost × (1 − device utilization)
  double weight = 0;       ///< w_i
  double energy_j = 0;
};

/// The split of one device interval.
struct Attribution {
  MicroUsd device_cost = 0;
  MicroUsd unallocated = 0;          ///< no process present
  std::vector<ProcessShare> shares;  ///< Σ cost + unallocated == device_cost exactly
  bool by_sm = false;                ///< weights from SM util (else memory share)
};

/// Splits `total` over `weights` in proportion by the largest remainder: floor shares, then one micro-dollar
/// each to the largest fractional parts (the earlier first on ties), so Σ = total exactly. All-zero weights
/// split equally; empty weights give an empty split. Every integer cost split of gpumeter's goes through it.
std::vector<MicroUsd> split_micros(MicroUsd total, const std::vector<std::uint64_t>& weights);

/// Splits `device_cost` (and `energy_j`) over the processes of `sample` per DESIGN §3: SM-utilization
/// share when any process has non-zero SM samples, else memory share; idle part by device utilization.
/// Integer split by largest remainder so the invariant holds exactly.
Attribution attribute(MicroUsd device_cost, double energy_j, const gpu::DeviceSample& sample);

// ---- energy and carbon -----------------------------------------------------------------------

/// Device energy: counter deltas when the counter works, else trapezoid integration of power; a counter
/// that goes backwards (driver reload) is detected and that interval falls back to the trapezoid.
class EnergyMeter {
 public:
  /// Feeds one sample; returns the joules of the interval since the previous sample.
  double add(const gpu::DeviceSample& sample);
  /// Total joules.
  double total_j() const { return total_j_; }
  /// The method used so far (counter if every interval used the counter).
  gpu::EnergyMethod method() const;
  /// Counter resets seen.
  unsigned resets() const { return resets_; }

 private:
  std::optional<gpu::DeviceSample> prev_;
  double total_j_ = 0;
  unsigned counter_intervals_ = 0, power_intervals_ = 0, resets_ = 0;
};

/// A carbon estimate with its inputs.
struct CarbonEstimate {
  double co2_kg = 0;
  double g_per_kwh = 0;
  double pue = 1.0;
  std::string intensity_source;  ///< dataset + region (or "--carbon-intensity")
  std::string pue_source;
};

/// kg CO2e = kWh × PUE × grid intensity for the quote's provider+region (or the overrides).
std::optional<CarbonEstimate> estimate_carbon(double energy_kwh, const catalog::Catalog& catalog,
                                              const std::string& provider, const std::string& region,
                                              std::optional<double> g_per_kwh_override = std::nullopt,
                                              std::optional<double> pue_override = std::nullopt);

}  // namespace gm::meter
