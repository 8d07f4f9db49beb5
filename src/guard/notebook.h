#pragma once
// Notebook cells and control datagrams of an attached session (`gpumeter attach`, the IPython extension;
// docs/notebooks.md): each cell's cost and utilization, and budget changes while the kernel runs.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "guard/run_state.h"

namespace gm::guard {

class NotebookCells final : public Collaborator {
 public:
  explicit NotebookCells(RunState& state) : st_(state) {}
  /// A control datagram: a cell started or ended, or the budget or warning percentages changed (a stop
  /// latched earlier is released: the new budget is evaluated afresh).
  void on_control(const SessionControl& control, std::int64_t now_ns);
  /// Adds the interval's mean utilization to every open cell.
  void on_interval(const Tick& tick) override;
  /// Cells still open end "unfinished".
  void on_finish() override;
  Result<void> flush(store::Ledger& ledger) override;
  void drop_pending() override { pending_.clear(); }
  const std::vector<store::CellRecord>& cells() const { return all_; }

 private:
  struct OpenCell {
    std::int64_t start_ns = 0;
    MicroUsd spent_start = 0;
    double util_sum = 0;
    std::int64_t util_n = 0;
    std::string source;
  };
  void cell_event(const CellEvent& c, std::int64_t now_ns);
  void end_cell(std::int64_t id, const OpenCell& o, store::CellStatus status, std::int64_t now_ns);

  RunState& st_;
  std::map<std::int64_t, OpenCell> open_;
  std::vector<store::CellRecord> pending_, all_;
};

}  // namespace gm::guard
