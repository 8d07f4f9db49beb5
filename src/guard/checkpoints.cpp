// Checkpoints (datagrams, --checkpoint-glob) and preemption notices of a supervised run.
#include "guard/checkpoints.h"

#include <fmt/format.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>

#include "util/units.h"

namespace gm::guard {

void Checkpoints::seen(std::int64_t now_ns, const std::string& path, const std::string& how) {
  last_checkpoint_ns_ = now_ns;
  checkpoint_spent_ = st_.spent(now_ns, true);
  gap_warned_ = false;
  st_.run.last_checkpoint_ms = st_.elapsed_ms(now_ns);
  // Recorded (the report's history and gaps), neither printed nor notified: jobs checkpoint often.
  st_.record_quiet(store::ActionRecord{st_.run.id, st_.elapsed_ms(now_ns), store::ActionKind::checkpoint,
                                       checkpoint_spent_,
                                       path.empty() ? "checkpoint (" + how + ")" : path + " (" + how + ")"});
}

void Checkpoints::scan_glob(std::int64_t now_ns) {
  if (!st_.cfg.checkpoint_glob) return;
  std::string pattern = *st_.cfg.checkpoint_glob;
  if (pattern.empty() || pattern.front() != '/') pattern = st_.cfg.checkpoint_dir + "/" + pattern;
  glob_t g{};
  std::optional<std::int64_t> newest;
  std::string newest_path;
  if (::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
    for (std::size_t i = 0; i < g.gl_pathc && i < 100'000; ++i) {
      struct stat st {};
      if (::stat(g.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const std::int64_t m =
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      if (!newest || m > *newest) {
        newest = m;
        newest_path = g.gl_pathv[i];
      }
    }
  }
  globfree(&g);
  if (!newest) return;
  // Files older than the run (a previous run's checkpoint) set the baseline without counting.
  const bool first = !checkpoint_mtime_ns_;
  if (!first && *newest <= *checkpoint_mtime_ns_) return;
  const bool before_run = *newest / 1'000'000 < st_.run.start_unix_ms;
  checkpoint_mtime_ns_ = newest;
  if (first && before_run) return;
  seen(now_ns, newest_path, "--checkpoint-glob");
}

void Checkpoints::on_interval(const Tick& tick) {
  if (!tick.evaluate) return;
  scan_glob(tick.now_ns);
  check_gap(tick.now_ns);
}

void Checkpoints::check_gap(std::int64_t now_ns) {
  if (!st_.cfg.checkpoint_interval_ms || gap_warned_ || st_.stopping) return;
  const std::int64_t since_ns = last_checkpoint_ns_.value_or(st_.start_ns);
  const std::int64_t gap_ms = (now_ns - since_ns) / 1'000'000;
  if (gap_ms <= *st_.cfg.checkpoint_interval_ms) return;
  gap_warned_ = true;
  const MicroUsd at_risk =
      meter::cost_between_micros(st_.spent(now_ns, false), last_checkpoint_ns_ ? checkpoint_spent_ : 0);
  st_.record_action(
      store::ActionKind::no_recent_checkpoint,
      fmt::format("no checkpoint for {} (the expected interval on this spot capacity is {}): "
                  "{} of work would be lost if the machine were taken now",
                  util::format_duration_s(static_cast<double>(gap_ms) / 1000.0),
                  util::format_duration_s(static_cast<double>(*st_.cfg.checkpoint_interval_ms) / 1000.0),
                  util::format_usd(util::micros_to_usd(std::max<MicroUsd>(0, at_risk)))),
      now_ns, st_.spent(now_ns, false));
}

void Checkpoints::on_notice(const cloud::CloudNotice& n, std::int64_t now_ns) {
  const std::string provider(cloud::provider_name(n.provider));
  const std::int64_t now_unix = st_.clock.unix_ms();
  std::string when;
  if (n.deadline_unix_ms)
    when = fmt::format(
        " (deadline {}, in {})", cloud::format_iso8601(*n.deadline_unix_ms),
        util::format_duration_s(
            static_cast<double>(std::max<std::int64_t>(0, *n.deadline_unix_ms - now_unix)) / 1000.0));
  if (!n.stop) {
    if (!warned_notices_.insert(n.id).second) return;
    st_.record_action(store::ActionKind::preemption_warning, n.detail + when, now_ns,
                      st_.spent(now_ns, false));
    return;
  }
  if (preempted_) return;
  preempted_ = true;
  st_.run.preemption_provider = provider;
  st_.run.preemption_notice_unix_ms = now_unix;
  st_.run.preemption_deadline_unix_ms = n.deadline_unix_ms;
  const MicroUsd spent_now = st_.spent(now_ns, false);
  st_.record_action(store::ActionKind::preempted, n.detail + when, now_ns, spent_now);
  if (!st_.stopping) {
    GuardDecision d;
    d.kind = store::ActionKind::preempted;
    d.stopped_by = store::StopReason::preemption;
    st_.stop_job(d, now_ns, spent_now);
  } else {
    st_.run.stopped_by = util::text_of(store::StopReason::preemption);
  }
  // SIGKILL after the grace or just before the provider's deadline, whichever comes first (never before
  // one second after the stop signal: a deadline already past is a clock problem, not a reason to give
  // the job no time at all).
  if (n.deadline_unix_ms) {
    const std::int64_t before_deadline_ns =
        now_ns + (*n.deadline_unix_ms - kPreemptionKillMarginMs - now_unix) * 1'000'000;
    st_.kill_deadline_ns =
        std::min(st_.kill_deadline_ns, std::max(before_deadline_ns, now_ns + 1'000'000'000));
  }
}

void Checkpoints::on_finish() {
  // Work lost: the spend since the last checkpoint of a run that did not succeed (all of it without one).
  if (st_.run.status != store::RunStatus::succeeded && st_.cfg.price)
    st_.run.lost_work_micros =
        std::max<MicroUsd>(0, meter::cost_between_micros(st_.spent(st_.end_ns, false),
                                                         last_checkpoint_ns_ ? checkpoint_spent_ : 0));
  if (st_.cfg.notices) {
    const cloud::WatcherHealth h = st_.cfg.notices->health();
    if (h.polls_failed > 0)
      st_.warn(
          fmt::format("the {} metadata service did not give a usable answer to {} of {} polls (last: {}): "
                      "preemption notices may have been missed; `gpumeter doctor` checks it",
                      cloud::provider_name(st_.cfg.notices->provider()), h.polls_failed,
                      h.polls_failed + h.polls_ok, h.last_error.empty() ? "answered later" : h.last_error));
  }
}

}  // namespace gm::guard
