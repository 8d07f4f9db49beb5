#pragma once
// RunMeter: the per-second metering of one `gpumeter run` over its allocated GPUs (DESIGN §3): exact
// per-interval cost per GPU, energy, utilization and memory statistics, which GPUs the job used, and how
// long every allocated GPU has been idle. Driven by a GpuBackend and explicit timestamps (testable).
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu.h"
#include "meter/meter.h"
#include "store/store.h"

namespace gm::meter {

/// Utilization under which a GPU counts as idle for --max-idle (percent).
inline constexpr double kIdleUtilPct = 5.0;

/// GPM SM activity (percent) under which an interval that shows utilization did no computing: NVML's
/// utilization also counts copies between host and GPU (a model's weights moving to it showed 10-18 % on an
/// H200 with its SMs idle), so where GPM measured the interval it must show the SMs working too.
inline constexpr double kWorkSmActivePct = 1.0;

/// Whether a GPU worked in an interval: utilization >= kIdleUtilPct and, where GPM measured the interval, SM
/// activity >= kWorkSmActivePct. Unreadable utilization is not work.
bool interval_did_work(std::optional<double> utilization_pct, const store::GpmPct& gpm);

/// Mean GPM activity of a GPU over the intervals it was working (interval_did_work, or a process of the job
/// on it when utilization is unreadable); each metric over the intervals that carried it.
class ActivityMean {
 public:
  /// Adds one interval's activity when `working`.
  void add(const store::GpmPct& gpm, bool working);
  /// The means; nullopt for a metric no working interval carried.
  store::GpmPct mean() const;
  /// Working intervals that carried at least one metric.
  std::int64_t intervals() const { return intervals_; }

 private:
  std::array<double, 7> sum_{};
  std::array<std::int64_t, 7> n_{};
  std::int64_t intervals_ = 0;
};

/// The ledger's copy of a device's GPM metrics.
store::GpmPct gpm_record(const gpu::GpmMetrics& metrics);

/// Per-GPU usage of a run, for the report.
struct GpuUsage {
  unsigned index = 0;
  std::string uuid;
  std::string name;
  bool used = false;  ///< a process of the job's tree appeared on it
  std::int64_t samples = 0;
  std::optional<double> util_avg_pct;
  std::optional<double> util_peak_pct;
  std::optional<std::uint64_t> mem_avg_bytes;
  std::optional<std::uint64_t> mem_peak_bytes;
  std::optional<std::uint64_t> mem_total_bytes;
  double busy_s = 0;  ///< Σ utilization × interval
  double energy_j = 0;
  MicroUsd cost_micros = 0;       ///< metered (per-interval) cost
  MicroUsd idle_cost_micros = 0;  ///< Σ interval cost × (1 − utilization) (reports count used GPUs)
  /// The longest stretch of consecutive intervals under kIdleUtilPct (unreadable ones end it).
  std::int64_t idle_stretch_start_ms = 0;
  std::int64_t idle_stretch_ms = 0;
  std::int64_t idle_stretch_intervals = 0;
  MicroUsd idle_stretch_cost_micros = 0;
  /// When the GPU first did work (interval_did_work), in ms since the run's start: the start of the first
  /// interval that showed it. nullopt: it never did. (The run's start-up counts it on used GPUs only.)
  std::optional<std::int64_t> first_busy_ms;
  /// When a process of the job first appeared on it (a CUDA context, not yet work), in ms since the run's
  /// start: the start of the first interval that showed it. nullopt: never.
  std::optional<std::int64_t> first_process_ms;
  ActivityMean activity;  ///< GPM activity while working
};

/// Model FLOPs utilisation, a ratio: tokens × flops_per_token ÷ (peak_tflops_per_gpu × 10¹² × gpus ×
/// seconds); nullopt when a figure is missing or not positive (docs/run.md "MFU").
std::optional<double> model_flops_utilization(double tokens, double flops_per_token,
                                              double peak_tflops_per_gpu, std::size_t gpus, double seconds);
/// When the run's GPUs first worked (ms since its start): the earliest first_busy_ms; nullopt: never.
std::optional<std::int64_t> earliest_busy_ms(const std::vector<GpuUsage>& gpus);

/// Usage per GPU from ledger samples (the same figures RunMeter computes live).
std::vector<GpuUsage> gpu_usage_from_samples(const std::vector<store::SampleRecord>& samples);

/// Parses CUDA_VISIBLE_DEVICES against the devices: indices or UUIDs (prefixes allowed); unset = all.
/// An entry that matches no device is an error naming it; an empty value means no GPU.
Result<std::vector<unsigned>> allocated_gpus(const std::optional<std::string>& cuda_visible_devices,
                                             const std::vector<gpu::DeviceInfo>& devices);

/// Meters a run's allocated GPUs.
class RunMeter {
 public:
  RunMeter(gpu::GpuBackend& backend, std::vector<unsigned> allocated, MicroUsd price_micros_per_gpu_hour,
           std::int64_t start_ns);
  /// Whether the job used GPU `index` in `sample` (decided by guard's JobGpuMatcher for supervised runs).
  using JobOnGpu = std::function<bool(unsigned index, const gpu::DeviceSample& sample)>;
  /// Samples every allocated GPU at `now_ns`; `job_pids` is the job's process tree (a GPU is the job's when
  /// one of them is in its process list). Returns one record per GPU (run_id 0, t_ms relative to the start).
  std::vector<store::SampleRecord> tick(std::int64_t now_ns, const std::set<std::uint32_t>& job_pids);
  /// The same, with the job's presence on each GPU decided by `job_on_gpu`.
  std::vector<store::SampleRecord> tick_with(std::int64_t now_ns, const JobOnGpu& job_on_gpu);
  /// Metered spend up to the last tick (exact per-interval integration over allocated GPUs).
  MicroUsd spent_micros() const;
  /// Spend at `now_ns` extrapolated from the last tick at the constant price (what the bill says).
  MicroUsd spent_at(std::int64_t now_ns) const;
  /// $/s of all allocated GPUs.
  double burn_usd_per_s() const;
  /// How long every allocated GPU has been under kIdleUtilPct; nullopt when one is busy or unknown.
  std::optional<std::int64_t> idle_for_ms(std::int64_t now_ns) const;
  const std::vector<GpuUsage>& usage() const { return usage_; }
  std::vector<std::string> used_uuids() const;
  std::vector<std::string> allocated_uuids() const;
  double energy_j() const;
  /// The method of every allocated GPU; mixed where they differ (GPUs without energy aside), none without
  /// any.
  store::RunEnergyMethod energy_method() const;
  /// Latest sample per allocated GPU (for the live status).
  const std::vector<gpu::DeviceSample>& latest() const { return latest_; }

 private:
  gpu::GpuBackend& backend_;
  std::vector<unsigned> allocated_;
  MicroUsd price_;
  std::int64_t start_ns_;
  std::int64_t last_ns_;
  std::vector<CostIntegrator> cost_;
  std::vector<EnergyMeter> energy_;
  std::vector<GpuUsage> usage_;
  std::vector<gpu::DeviceSample> latest_;
  std::vector<double> util_sum_, mem_sum_;
  std::vector<std::int64_t> util_n_, mem_n_;
  std::optional<std::int64_t> idle_since_ns_;
};

/// The per-minute rollups of a run's samples (the ledger's rollup rows): one row per (minute, GPU), changed
/// while its minute lasts and never touched again once the minute is complete.
class RollupBook {
 public:
  /// Adds `sample` (its run_id set) to the row of its GPU in `minute_unix` (unix time / 60).
  void add(const store::SampleRecord& sample, std::int64_t minute_unix);
  /// Rows changed since the last call.
  bool changed() const { return !dirty_.empty(); }
  /// The rows changed since the last call; then forgets the rows of minutes before `current_minute`.
  std::vector<store::RollupRecord> take_changed(std::int64_t current_minute);

 private:
  std::map<std::pair<std::int64_t, unsigned>, store::RollupRecord> rows_;
  std::set<std::pair<std::int64_t, unsigned>> dirty_;
};

/// A forecast of the run's total cost.
struct Forecast {
  double total_usd = 0;    ///< spent + remaining_s × burn rate
  double low_usd = 0;      ///< with the fast end of the pace (10th percentile of the pair slopes)
  double high_usd = 0;     ///< with the slow end (90th percentile)
  double remaining_s = 0;  ///< median estimate
  double s_per_step = 0;   ///< the job's pace: median slope of time against step over the window
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
};

/// How far a forecast's interval reaches below and above its total (each at least 0); nullopt when the
/// interval is empty (high <= low).
std::optional<std::pair<double, double>> forecast_spread_usd(const Forecast& f);
/// The band (low, high) around `total_usd` of a spread from forecast_spread_usd.
std::pair<double, double> forecast_band_usd(double total_usd, const std::pair<double, double>& spread);

/// The job's pace and the forecast of its end from its progress reports (docs/run.md "Forecast").
/// Progress may arrive in bursts (the CPU runs ahead of the GPU and waits at a synchronisation every k
/// steps): the pace is a Theil–Sen slope of time against step over a window of recent reports that spans
/// several bursts (at least kMinWindowS and kWindowGaps × the gap scale, the time-weighted 95th percentile
/// of the recent gaps between reports), from pairs of reports at least half the window apart (when the
/// reports come in bursts, from the first report of each burst only, over at least kMinHeads of them, once
/// there are three); the interval comes from the 10th and 90th percentiles of those slopes and from the
/// spread of the reports about the fitted line, and is at least ±kMinSpread of the remaining time. The first
/// interval (start-up, compilation, autotuning) and the first 2 % of the steps are excluded. It never reaches
/// below the spend, and with steps left its high end is above it. No forecast until kMinIntervals usable
/// intervals exist and the usable reports span kMinSpanGaps gap scales, when the total is unknown, or when no
/// time per step was measured.
class Forecaster {
 public:
  static constexpr std::size_t kMinIntervals = 3;
  /// Reports closer together than this (read in one burst) count as one interval for kMinIntervals.
  static constexpr double kMinIntervalS = 0.05;
  /// The interval is at least this fraction of the remaining time either side of the median estimate.
  static constexpr double kMinSpread = 0.05;
  /// The pace window spans at least this much time...
  static constexpr double kMinWindowS = 3.0;
  /// ...and at least this many gap scales (so it holds several bursts).
  static constexpr double kWindowGaps = 8.0;
  /// With bursts, the window holds at least this many burst heads (three whole bursts).
  static constexpr std::size_t kMinHeads = 4;
  /// No forecast before the usable reports span this many gap scales (two bursts).
  static constexpr double kMinSpanGaps = 2.0;
  /// Reports kept (older ones are thinned by half when full) and used per estimate.
  static constexpr std::size_t kMaxPoints = 4096;
  static constexpr std::size_t kMaxFitPoints = 256;
  /// Gaps between reports kept for the gap scale.
  static constexpr std::size_t kMaxGaps = 1024;

  /// Records that `step` was reached at `t_s` seconds since the run's start (`total_steps` when known).
  void add(double t_s, std::int64_t step, std::optional<std::int64_t> total_steps);
  /// Forecast at `now_s` with `spent_usd` so far and the burn rate; nullopt when not enough progress.
  std::optional<Forecast> forecast(double now_s, double spent_usd, double burn_usd_per_s) const;
  /// The job's pace now (seconds per step, median), as forecast() uses it; nullopt while it has none.
  std::optional<double> s_per_step() const;
  /// Usable intervals so far (reports at least kMinIntervalS apart, after the warm-up).
  std::size_t intervals() const { return intervals_; }
  std::optional<std::int64_t> last_step() const { return last_step_; }
  std::optional<std::int64_t> total_steps() const { return total_; }

 private:
  struct Point {
    double t_s;
    std::int64_t step;
    double gap_s;  // since the report before it
  };
  struct Pace {
    double mid, low, high;  // seconds per step
    double gap_s;           // the gap scale
    std::vector<Point> window;
  };
  std::optional<Pace> pace() const;
  double gap_scale_s(double since_s) const;

  std::vector<Point> points_;                      // usable reports (after the warm-up), oldest first
  std::vector<std::pair<double, double>> gaps_s_;  // (seconds since the report before, at), newest last
  std::size_t intervals_ = 0;
  std::optional<double> last_t_s_;
  std::optional<std::int64_t> last_step_;
  std::optional<double> base_t_s_;  // where the next interval starts
  std::optional<std::int64_t> base_step_;
  std::optional<std::int64_t> total_;
  bool seen_first_interval_ = false;
};

}  // namespace gm::meter
