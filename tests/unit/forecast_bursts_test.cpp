// The forecaster on progress that arrives in asynchronous bursts (issue 35): a job whose CPU launches GPU
// work ahead of the GPU and waits for it at a synchronisation every `sync` steps, in exact virtual time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "meter/run_meter.h"

namespace gm {
namespace {

struct Report {
  double t_s;
  std::int64_t step;
};

enum class Printer { client, tqdm, log_every_25 };

struct Job {
  std::vector<Report> reports;
  double end_s = 0;  ///< when the GPU has done the last step
};

/// `steps` steps after `startup_s` of start-up: the GPU takes `gpu_s × pace(i)` for step i after the previous
/// one, the CPU `launch × gpu_s` to launch each, and waits for the GPU every `sync` steps; progress is
/// reported after each launch, by the client (every step), a tqdm bar (redrawn at most every 0.1 s) or a log
/// line every 25 steps.
Job async_job(std::int64_t steps, std::int64_t sync, double launch, Printer printer,
              double pace_change = 1.0) {
  const double startup_s = 3.0;
  auto pace = [&](std::int64_t i) { return i <= steps / 5 ? 1.0 : pace_change; };
  double sum = 0;
  for (std::int64_t i = 1; i <= steps; ++i) sum += pace(i);
  const double gpu_s = 9.0 / sum;  // 9 s of GPU work in all
  Job job;
  double cpu = startup_s, gpu_done = startup_s, last_print = -1;
  for (std::int64_t i = 1; i <= steps; ++i) {
    cpu += launch * gpu_s;
    gpu_done = std::max(gpu_done, cpu) + gpu_s * pace(i);
    if (i % sync == 0) cpu = gpu_done;
    bool report = true;
    if (printer == Printer::tqdm) report = cpu - last_print >= 0.1 || i == steps;
    if (printer == Printer::log_every_25) report = i % 25 == 0;
    if (report) {
      job.reports.push_back({cpu, i});
      last_print = cpu;
    }
  }
  job.end_s = std::max(cpu, gpu_done);
  return job;
}

struct Check {
  double at_fraction;
  double forecast_error;  ///< (forecast − final) / final, at $1 a second
  double eta_error;       ///< (remaining_s − time left) / time left
  bool contains;          ///< the interval contains the final cost
};

/// The forecast when the job's report of `fraction` of its steps arrives; nullopt when there is none.
std::optional<Check> forecast_at(const Job& job, std::int64_t steps, double fraction) {
  meter::Forecaster f;
  f.add(0, 0, steps);  // the bar drawn at 0 before the start-up
  double now = 0;
  for (const auto& r : job.reports) {
    if (static_cast<double>(r.step) > fraction * static_cast<double>(steps)) break;
    f.add(r.t_s, r.step, steps);
    now = r.t_s;
  }
  const auto fc = f.forecast(now, now, 1.0);
  if (!fc) return std::nullopt;
  const double left = job.end_s - now;
  return Check{fraction, (fc->total_usd - job.end_s) / job.end_s, (fc->remaining_s - left) / left,
               fc->low_usd <= job.end_s + 1e-9 && fc->high_usd >= job.end_s - 1e-9};
}

TEST(ForecastBurstsTest, BurstsAcrossSyncIntervalsLaunchTimesAndPrintersForecastWithinTenPercent) {
  for (const std::int64_t sync : {1, 3, 10, 50, 200})
    for (const double launch : {0.1, 0.5, 0.9})
      for (const Printer printer : {Printer::client, Printer::tqdm, Printer::log_every_25}) {
        const std::int64_t steps = std::max<std::int64_t>(900, 8 * sync);
        SCOPED_TRACE(::testing::Message()
                     << "sync every " << sync << ", launch " << launch << "× the GPU time, "
                     << (printer == Printer::client ? "client"
                         : printer == Printer::tqdm ? "tqdm"
                                                    : "log lines"));
        const Job job = async_job(steps, sync, launch, printer);
        for (const double at : {0.25, 0.3, 0.4, 0.5, 0.6}) {
          const auto c = forecast_at(job, steps, at);
          // Bursts of 200 steps in 1600: three burst heads (two whole bursts) are there from 37.5 %.
          if (sync < 200 || at >= 0.4) {
            ASSERT_TRUE(c.has_value()) << "a forecast at " << at;
          }
          if (!c) continue;
          EXPECT_LE(std::abs(c->forecast_error), 0.10) << "at " << at;
          EXPECT_LE(std::abs(c->eta_error), 0.25) << "at " << at;
          EXPECT_TRUE(c->contains) << "at " << at;
        }
      }
}

TEST(ForecastBurstsTest, TheIssuesJobIsForecastWithinTwoPercentAtAQuarter) {
  // The issue's job: a synchronisation every 10 steps, launches a tenth of the GPU time, the client every
  // step. Intervals between reports measured the CPU's launch rate: the old estimator said 45 % low here.
  const Job job = async_job(900, 10, 0.1, Printer::client);
  const auto c = forecast_at(job, 900, 0.28);
  ASSERT_TRUE(c.has_value());
  EXPECT_LE(std::abs(c->forecast_error), 0.02);
  EXPECT_LE(std::abs(c->eta_error), 0.05);
  EXPECT_TRUE(c->contains);
}

TEST(ForecastBurstsTest, APaceChangeIsFollowedWithinTheWindow) {
  // Steps get 1.9 times slower, or faster, after the first fifth: from half the work the forecast follows.
  for (const double change : {1.9, 0.55})
    for (const Printer printer : {Printer::client, Printer::tqdm})
      for (const double at : {0.5, 0.6}) {
        SCOPED_TRACE(::testing::Message() << "pace × " << change << " at " << at);
        const Job job = async_job(900, 20, 0.2, printer, change);
        const auto c = forecast_at(job, 900, at);
        ASSERT_TRUE(c.has_value());
        EXPECT_LE(std::abs(c->forecast_error), 0.10);
        EXPECT_LE(std::abs(c->eta_error), 0.25);
        EXPECT_TRUE(c->contains);
      }
}

TEST(ForecastBurstsTest, PaceIsExposedAndTheStartUpIsExcluded) {
  // 0.5 s per step after a 20 s first step (compilation): the pace is 0.5, not diluted by the first step.
  meter::Forecaster f;
  EXPECT_FALSE(f.s_per_step().has_value());
  f.add(0, 0, 1000);
  for (int s = 1; s <= 200; ++s) f.add(20 + (s - 1) * 0.5, s, 1000);
  ASSERT_TRUE(f.s_per_step().has_value());
  EXPECT_DOUBLE_EQ(*f.s_per_step(), 0.5);
  const auto fc = f.forecast(20 + 199 * 0.5, 0, 1.0);
  ASSERT_TRUE(fc);
  EXPECT_DOUBLE_EQ(fc->s_per_step, 0.5);
  EXPECT_DOUBLE_EQ(fc->remaining_s, 800 * 0.5);
}

TEST(ForecastBurstsTest, ABurstAloneGivesNoForecast) {
  // The first two bursts: ten steps 1 ms apart, then a 1 s pause. One burst's steps tell the CPU's pace only.
  meter::Forecaster f;
  f.add(0, 0, 200);
  double t = 1;
  std::int64_t step = 0;
  for (int burst = 0; burst < 2; ++burst) {
    for (int i = 0; i < 10; ++i) f.add(t + i * 0.001, ++step, 200);
    t += 1.0;
  }
  EXPECT_FALSE(f.forecast(t, t, 1.0).has_value()) << "usable reports span one burst";
  for (int burst = 0; burst < 3; ++burst) {
    for (int i = 0; i < 10; ++i) f.add(t + i * 0.001, ++step, 200);
    t += 1.0;
  }
  const auto fc = f.forecast(t - 1.0 + 0.009, t, 1.0);
  ASSERT_TRUE(fc);
  EXPECT_NEAR(fc->s_per_step, 0.1, 0.002) << "a tenth of a second per step, not a millisecond";
}

}  // namespace
}  // namespace gm
