// Serving counters of a supervised run: scrapes folded per model, the live window, the ledger's rows.
#include "guard/serving_counters.h"

#include <fmt/format.h>

namespace gm::guard {

void ServingCounters::on_scrape(const serving::InferenceScrape& scrape) {
  if (!scrape.endpoint.empty()) endpoint_ = scrape.endpoint;
  if (!scrape.reading) {
    ++failed_;
    error_ = scrape.error;
    return;
  }
  ++ok_;
  engine_ = serving::to_string(scrape.reading->engine);
  // The server is the run's own: its counters count from zero. A counter below its last value, or a new
  // process start time, is an engine restart: the new value counts from zero (never negative, never twice).
  const serving::ServedFold::Step step = fold_.add(*scrape.reading);
  for (const auto& [name, delta] : step.models) {
    auto [it, added] = served_.try_emplace(name);
    ModelServed& m = it->second;
    changed_ = changed_ || added;
    for (std::size_t k = 0; k < 4; ++k) {
      if (!delta.has[k]) continue;
      if (!m.has[k]) changed_ = true;
      m.has[k] = true;
      if (delta.counts[k] > 0) {
        m.total[k] += delta.counts[k];
        changed_ = true;
      }
    }
  }
  if (step.restarted) ++restarts_;
}

void ServingCounters::on_interval(const Tick& tick) {
  if (served_.empty()) return;
  WindowPoint p{tick.now_ns, tick.spent_micros, 0, 0};
  for (const auto& [name, m] : served_) {
    p.generated += m.total[serving::kGeneratedTokens];
    p.requests += m.total[serving::kRequests];
  }
  window_.push_back(p);
  while (window_.size() > 2 && tick.now_ns - window_[1].t_ns >= kServingWindowMs * 1'000'000)
    window_.pop_front();
  if (!changed_) return;
  changed_ = false;
  for (const auto& [name, m] : served_) {
    store::InferenceRecord r;
    r.run_id = st_.run.id;
    r.t_ms = st_.elapsed_ms(tick.now_ns);
    r.model = name;
    r.engine = engine_;
    if (m.has[serving::kPromptTokens]) r.prompt_tokens = m.total[serving::kPromptTokens];
    if (m.has[serving::kGeneratedTokens]) r.generated_tokens = m.total[serving::kGeneratedTokens];
    if (m.has[serving::kCachedTokens]) r.cached_tokens = m.total[serving::kCachedTokens];
    if (m.has[serving::kRequests]) r.requests = m.total[serving::kRequests];
    r.cost_micros = tick.spent_micros;
    pending_.push_back(r);
    all_.push_back(r);
  }
}

void ServingCounters::on_finish() {
  if (st_.cfg.inference && ok_ == 0)
    st_.warn("no engine metrics were read from the server" +
             (endpoint_.empty() ? std::string(" (no listening port of the job answered /metrics)")
                                : " at " + endpoint_) +
             (error_.empty() ? std::string() : ": " + error_));
  if (restarts_ > 0)
    st_.warn(fmt::format("the serving engine restarted {} time(s): its counters were continued from zero",
                         restarts_));
}

Result<void> ServingCounters::flush(store::Ledger& ledger) {
  GM_TRY_VOID(ledger.append_inference(pending_));
  pending_.clear();
  return ok_result();
}

void ServingCounters::fill(StatusSnapshot& s) const {
  if (window_.size() < 2) return;
  const WindowPoint& a = window_.front();
  const WindowPoint& b = window_.back();
  const double generated = b.generated - a.generated, requests = b.requests - a.requests;
  if (st_.cfg.price && generated > 0)
    s.usd_per_1m_generated_tokens =
        meter::usd_per_units(meter::cost_between_micros(b.spent, a.spent), generated, 1e6);
  if (st_.cfg.price && requests > 0)
    s.usd_per_1k_requests = meter::usd_per_units(meter::cost_between_micros(b.spent, a.spent), requests, 1e3);
  if (b.t_ns > a.t_ns) s.generated_tokens_per_s = generated / (static_cast<double>(b.t_ns - a.t_ns) / 1e9);
}

}  // namespace gm::guard
