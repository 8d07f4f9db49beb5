// Spot capacity: Young/Daly checkpoint interval and the expected wall time with interruptions.
#include <cmath>

#include "plan/plan.h"

namespace gm::plan {

double young_interval_s(double checkpoint_s, double mtbi_s) {
  return std::sqrt(2.0 * checkpoint_s * mtbi_s);
}

double daly_interval_s(double checkpoint_s, double mtbi_s) {
  if (checkpoint_s >= 2.0 * mtbi_s) return mtbi_s;
  const double x = checkpoint_s / (2.0 * mtbi_s);
  return std::sqrt(2.0 * checkpoint_s * mtbi_s) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - checkpoint_s;
}

SpotOutcome expected_spot(const SpotInputs& in) {
  SpotOutcome out;
  if (!(in.interruptions_per_hour > 0)) {
    out.wall_s = in.work_s;
    out.mtbi_s = INFINITY;
    out.interval_s = INFINITY;
    return out;
  }
  const double m = 3600.0 / in.interruptions_per_hour;
  out.mtbi_s = m;
  const double delta = in.checkpoint_s;
  out.interval_s = delta > 0 ? daly_interval_s(delta, m) : 0;
  // A notice at least as long as a checkpoint write lets the job save its state before it goes: nothing is
  // redone, but the write still costs δ. Otherwise on average half an interval (and its write) is lost.
  out.checkpoint_on_notice = in.notice_s && delta > 0 && *in.notice_s >= delta;
  const double lost = out.checkpoint_on_notice ? delta : (out.interval_s + delta) / 2.0;
  const double per_interruption = in.restart_s + lost;
  const double progress_fraction = 1.0 - per_interruption / m;
  const double periodic = out.interval_s > 0 ? in.work_s * delta / out.interval_s : 0;
  if (progress_fraction <= 0.05) {
    out.feasible = false;
    out.wall_s = INFINITY;
    return out;
  }
  out.wall_s = (in.work_s + periodic) / progress_fraction;
  out.expected_interruptions = out.wall_s / m;
  out.checkpoint_overhead_s = periodic;
  out.restart_overhead_s = out.expected_interruptions * in.restart_s;
  out.redone_s = out.expected_interruptions * lost;
  return out;
}

StatedDefault default_interruption_rate(std::string_view provider) {
  if (provider == "aws")
    return {
        0.01,
        "aws: 0.01 interruptions per instance-hour (planning default: the Spot Instance Advisor publishes "
        "only monthly buckets <5 % .. >20 %, and GPU capacity is reclaimed more often than average)"};
  if (provider == "gcp")
    return {
        0.02,
        "gcp: 0.02 per instance-hour (planning default; preemptible VMs stop after 24 h at most, Spot VMs "
        "have no cap and no published rate)"};
  if (provider == "azure")
    return {
        0.02,
        "azure: 0.02 per instance-hour (planning default; Azure publishes eviction-rate bands per VM size "
        "in the portal only)"};
  return {0.02, std::string(provider) + ": 0.02 per instance-hour (planning default, no published rate)"};
}

}  // namespace gm::plan
