#pragma once
// Cost KPIs of runs, as pure functions over ledger records: $ per 1k samples, $ per 1M tokens, $ to reach a
// target metric, MFU, and scaling efficiency across runs with different GPU counts. Formulas: docs/report.md.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "meter/target.h"
#include "store/store.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::report {

// MetricTarget and parse_metric_target live in meter/target.h (the live target forecast uses them too).

/// The first progress point meeting a target.
struct TargetHit {
  std::int64_t t_ms = 0;
  std::optional<std::int64_t> step;
  double value = 0;
  MicroUsd cost_micros = 0;  ///< spend when the point arrived: the $ to reach the target
};

/// The first progress point (in time order) whose metric meets the target; nullopt if none does.
std::optional<TargetHit> cost_to_target(const std::vector<store::ProgressRecord>& progress,
                                        const meter::MetricTarget& target);

/// Largest value of a cumulative counter over the progress points (samples or tokens); nullopt if never sent.
std::optional<std::int64_t> progress_max_samples(const std::vector<store::ProgressRecord>& progress);
std::optional<std::int64_t> progress_max_tokens(const std::vector<store::ProgressRecord>& progress);
std::optional<std::int64_t> progress_max_step(const std::vector<store::ProgressRecord>& progress);
/// The metric's value at the last progress point that carries it.
std::optional<double> progress_last_metric(const std::vector<store::ProgressRecord>& progress,
                                           const std::string& metric);

/// Rate of a cumulative counter: (last − first) ÷ (t_last − t_first) over the points carrying it, per
/// second; with a single point, value ÷ t. nullopt without a positive time span.
std::optional<double> progress_rate_per_s(const std::vector<store::ProgressRecord>& progress,
                                          std::optional<std::int64_t> store::ProgressRecord::*field);

/// Model FLOPs per token: 6 × params for training (forward + backward), 2 × params for inference.
double model_flops_per_token(double params, bool training);

/// The GPU's dense peak FLOP/s for MFU: bf16 dense, else fp16 dense, else tf32 dense, else fp32; nullopt
/// when the catalog has none of them.
std::optional<double> dense_peak_flops(const catalog::GpuSpec& gpu);

/// MFU = tokens/s × FLOPs per token ÷ (dense peak FLOP/s per GPU × GPUs), as a fraction.
std::optional<double> mfu(double tokens_per_s, double flops_per_token, double peak_flops_per_gpu, std::size_t gpus);

/// The KPIs of one run.
struct RunKpis {
  std::optional<std::int64_t> steps;
  std::optional<std::int64_t> samples;
  std::optional<std::int64_t> tokens;
  std::optional<double> usd_per_step;
  std::optional<double> usd_per_1k_samples;
  std::optional<double> usd_per_1m_tokens;
  std::optional<double> tokens_per_s;
  std::optional<double> samples_per_s;
  std::optional<double> mfu;                   ///< fraction of dense peak
  std::optional<double> model_flops_per_token;
  std::optional<double> peak_flops_per_gpu;
  std::string mfu_note;                        ///< why MFU is missing, or how it was computed
  std::optional<TargetHit> target_hit;
  std::optional<meter::MetricTarget> target;
};

/// Options for computing KPIs.
struct KpiOptions {
  std::optional<double> params;                ///< model parameters (--params); else the run's "params" label
  bool training = true;
  std::optional<meter::MetricTarget> target;
};

/// Computes a run's KPIs from its record and progress; `gpu` is the catalog spec of its GPU (may be null).
RunKpis compute_kpis(const store::RunRecord& run, const std::vector<store::ProgressRecord>& progress,
                     const catalog::GpuSpec* gpu, const KpiOptions& options);

/// Serving KPIs of a run that wrapped an inference server (`gpumeter run --inference-endpoint`;
/// docs/inference.md "Serving under gpumeter run"). Cost is the run's cost; tokens and requests are the
/// engine's counters over the run (summed over models); a ratio with a zero denominator is nullopt.
struct ServingKpis {
  std::string engine;
  std::vector<std::string> models;
  std::optional<double> prompt_tokens, generated_tokens, cached_tokens, requests;
  std::optional<double> usd_per_1m_prompt_tokens;
  std::optional<double> usd_per_1m_generated_tokens;
  std::optional<double> usd_per_1m_tokens;  ///< prompt + generated
  std::optional<double> usd_per_1k_requests;
  std::optional<double> generated_tokens_per_s;       ///< generated ÷ wall time
  std::optional<double> peak_generated_tokens_per_s;  ///< saturation: the best kSaturationWindowMs of the run
  std::optional<double> load_ratio;                   ///< mean ÷ peak generated tokens/s
  /// Cost at saturation: the run's $/s ÷ peak generated tokens/s × 1e6 (= $/1M generated × load ratio).
  std::optional<double> usd_per_1m_generated_tokens_at_peak;
  /// What `gpumeter plan --task inference` predicts for the served model on the run's GPUs at the run's
  /// price, at the batch (concurrent sequences) with the lowest $/1M that fits, for the run's mean request
  /// shape.
  std::optional<double> plan_usd_per_1m_generated_tokens;
  std::optional<std::string> plan_model;  ///< the plan table's model the served name matched
  std::optional<int> plan_batch;          ///< concurrent sequences of that prediction
  std::string plan_note;                  ///< why there is no plan figure ("" when there is one)
};

/// Fills the plan_* fields of a served run's KPIs from the plan model (docs/inference.md "Load vs
/// saturation").
void add_plan_prediction(ServingKpis& kpis, const store::RunRecord& run, const catalog::Catalog& catalog);

/// Shortest window over which the peak (saturation) throughput of a served run is measured.
inline constexpr std::int64_t kSaturationWindowMs = 5'000;

/// Serving KPIs from a run and its InferenceRecords; nullopt when the run has none.
std::optional<ServingKpis> serving_kpis(const store::RunRecord& run,
                                        const std::vector<store::InferenceRecord>& records);

/// One run's row in a scaling study.
struct ScalingRow {
  std::int64_t run_id = 0;
  std::size_t gpus = 0;
  double throughput_per_s = 0;       ///< of the unit named in ScalingStudy::unit
  double speedup = 0;                ///< throughput ÷ baseline throughput
  double efficiency = 0;             ///< speedup ÷ (gpus ÷ baseline gpus)
  std::optional<double> usd_per_unit;
  std::optional<double> cost_ratio;  ///< $ per unit ÷ baseline $ per unit
};

/// Scaling efficiency across runs of the same job with different GPU counts. Baseline: fewest GPUs.
struct ScalingStudy {
  std::string unit;                  ///< "tokens", "samples", "steps" or "runs" (whole-run wall time)
  std::vector<ScalingRow> rows;      ///< sorted by GPU count
};

/// Input of one run for a scaling study.
struct ScalingInput {
  store::RunRecord run;
  std::vector<store::ProgressRecord> progress;
};

/// Builds a scaling study; the unit is the first of tokens, samples, steps that every run reports, else
/// each run counts as one unit of work done in its wall time. Usage error with fewer than two runs.
Result<ScalingStudy> scaling_study(const std::vector<ScalingInput>& runs);

}  // namespace gm::report
