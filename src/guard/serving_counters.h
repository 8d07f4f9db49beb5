#pragma once
// The serving counters of a supervised run that wraps an inference server (`--inference-endpoint`): each
// scrape folded with serving's ServedFold (the server is the run's own, so everything it served counts),
// the live window of the status line, and the per-model rows for the ledger when they changed.
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "guard/run_state.h"
#include "serving/serving.h"

namespace gm::guard {

class ServingCounters final : public Collaborator {
 public:
  explicit ServingCounters(RunState& state) : st_(state) {}
  /// A scrape of the server's engine metrics (folded into the run's counters at the next interval).
  void on_scrape(const serving::InferenceScrape& scrape);
  void on_interval(const Tick& tick) override;
  /// Warns when no scrape succeeded, and of engine restarts.
  void on_finish() override;
  Result<void> flush(store::Ledger& ledger) override;
  void drop_pending() override { pending_.clear(); }
  void fill(StatusSnapshot& snapshot) const override;
  const std::vector<store::InferenceRecord>& records() const { return all_; }

 private:
  /// Cumulative counters of one model since the run's start (serving::ServedCounter order).
  struct ModelServed {
    std::array<double, 4> total{};
    std::array<bool, 4> has{};
  };
  struct WindowPoint {
    std::int64_t t_ns = 0;
    MicroUsd spent = 0;
    double generated = 0, requests = 0;
  };

  RunState& st_;
  serving::ServedFold fold_{true};
  std::map<std::string, ModelServed> served_;
  std::string engine_, endpoint_, error_;
  std::int64_t ok_ = 0, failed_ = 0, restarts_ = 0;
  bool changed_ = false;
  std::deque<WindowPoint> window_;
  std::vector<store::InferenceRecord> pending_, all_;
};

}  // namespace gm::guard
