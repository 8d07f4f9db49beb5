// Notebook cells and budget changes of an attached session.
#include "guard/notebook.h"

#include <fmt/format.h>

#include <algorithm>

namespace gm::guard {
namespace {

/// Notebook cells started and not ended that an attached session keeps (the oldest are dropped).
constexpr std::size_t kMaxOpenCells = 64;

}  // namespace

void NotebookCells::on_control(const SessionControl& c, std::int64_t now_ns) {
  if (c.cell) cell_event(*c.cell, now_ns);
  if (c.budget_micros || c.warn_at_pct) {
    GuardConfig g = st_.policy.config();
    if (c.budget_micros) g.budget_micros = *c.budget_micros;
    if (c.warn_at_pct) g.warn_at_pct = *c.warn_at_pct;
    st_.policy = BudgetGuard(g);  // a latched stop is released: the new budget is evaluated afresh
    if (st_.stopping && !st_.cfg.kill_after_grace) st_.stopping = false;
    if (!st_.cfg.kill_after_grace) st_.killed = true;  // the signal is the whole stop action: none follows
    st_.run.budget_micros = g.budget_micros;
    st_.record_action(
        store::ActionKind::budget,
        (g.budget_micros ? fmt::format("budget set to {}", util::format_micros(*g.budget_micros))
                         : std::string("warning percentages changed")) +
            (c.by.empty() ? "" : " (by " + c.by + ")"),
        now_ns, st_.spent(now_ns, true));
  }
}

void NotebookCells::cell_event(const CellEvent& c, std::int64_t now_ns) {
  if (c.start) {
    // Cells are sequential in a kernel; starts without ends (a sender gone wrong) must not grow without end.
    if (open_.size() >= kMaxOpenCells && !open_.count(c.cell_id)) open_.erase(open_.begin());
    open_[c.cell_id] = OpenCell{now_ns, st_.spent(now_ns, true), 0, 0, c.source};
    return;
  }
  auto it = open_.find(c.cell_id);
  if (it == open_.end()) {
    if (c.status != store::CellStatus::refused) return;  // an end without a start: nothing was metered
    it = open_.emplace(c.cell_id, OpenCell{now_ns, st_.spent(now_ns, true), 0, 0, c.source}).first;
  }
  end_cell(it->first, it->second, c.status, now_ns);
  open_.erase(it);
}

void NotebookCells::end_cell(std::int64_t id, const OpenCell& o, store::CellStatus status,
                             std::int64_t now_ns) {
  store::CellRecord r;
  r.run_id = st_.run.id;
  r.cell_id = id;
  r.start_ms = st_.elapsed_ms(o.start_ns);
  r.end_ms = st_.elapsed_ms(now_ns);
  r.cost_micros = std::max<MicroUsd>(0, meter::cost_between_micros(st_.spent(now_ns, true), o.spent_start));
  if (o.util_n > 0)
    r.utilization_pct = o.util_sum / static_cast<double>(o.util_n);
  else if (st_.cfg.telemetry)
    r.utilization_pct = st_.mean_util();
  r.status = status;
  r.source = o.source;
  pending_.push_back(r);
  all_.push_back(r);
  st_.sink.cell(r);
}

void NotebookCells::on_interval(const Tick&) {
  if (const auto util = st_.mean_util())
    for (auto& [id, o] : open_) {
      o.util_sum += *util;
      ++o.util_n;
    }
}

void NotebookCells::on_finish() {
  for (const auto& [id, o] : open_) end_cell(id, o, store::CellStatus::unfinished, st_.end_ns);
  open_.clear();
}

Result<void> NotebookCells::flush(store::Ledger& ledger) {
  GM_TRY_VOID(ledger.append_cells(pending_));
  pending_.clear();
  return ok_result();
}

}  // namespace gm::guard
