#pragma once
// The progress of a supervised run: datagrams and the job's own output bars in, the run's latest progress
// point, forecaster and the progress rows for the ledger out (docs/run.md "Progress").
#include <cstdint>
#include <string_view>

#include "guard/checkpoints.h"
#include "guard/run_state.h"

namespace gm::guard {

class ProgressIntake final : public Collaborator {
 public:
  ProgressIntake(RunState& state, Checkpoints& checkpoints) : st_(state), checkpoints_(checkpoints) {}
  /// A progress datagram (malformed ones are counted).
  void on_datagram(std::string_view datagram, std::int64_t now_ns);
  /// Bytes of the job's output, scanned for bars.
  void on_output(JobStream stream, std::string_view bytes, std::int64_t now_ns);
  /// A datagram that could not be read.
  void malformed() { ++malformed_; }
  void on_finish() override;

 private:
  void on_progress(const ProgressUpdate& update, std::int64_t now_ns);

  RunState& st_;
  Checkpoints& checkpoints_;
  OutputProgressParser output_parser_;  ///< one tracker for both streams: bars nest across them
  bool first_step_stored_ = false;      ///< the first point with a step past 0 is pending or stored
  bool keep_pending_back_ = false;      ///< the last pending point is that first step: not to be replaced
  std::int64_t malformed_ = 0;
};

}  // namespace gm::guard
