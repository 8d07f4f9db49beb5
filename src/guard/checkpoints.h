#pragma once
// Checkpoints and the cloud's preemption notices of a supervised run (docs/run.md "Spot capacity"): a
// checkpoint is a datagram or a newer file matching --checkpoint-glob; a spot job that goes longer than its
// interval without one is warned once; a stop notice stops the job before the provider's deadline; at the
// end, the work lost since the last checkpoint and the metadata service's health.
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "guard/run_state.h"

namespace gm::guard {

class Checkpoints final : public Collaborator {
 public:
  explicit Checkpoints(RunState& state) : st_(state) {}
  /// The job wrote a checkpoint (`how`: the datagram or --checkpoint-glob).
  void seen(std::int64_t now_ns, const std::string& path, const std::string& how);
  /// Newest mtime of the files matching --checkpoint-glob; a newer one than before is a checkpoint.
  void scan_glob(std::int64_t now_ns);
  /// A notice of the metadata service: a stop notice sends the stop signal at once (SIGKILL after the
  /// grace or kPreemptionKillMarginMs before the deadline, whichever first); a warning is recorded.
  void on_notice(const cloud::CloudNotice& notice, std::int64_t now_ns);
  /// The run ends "preempted".
  bool preempted() const { return preempted_; }
  void on_interval(const Tick& tick) override;
  void on_finish() override;

 private:
  void check_gap(std::int64_t now_ns);

  RunState& st_;
  bool preempted_ = false;
  std::set<std::string> warned_notices_;
  std::optional<std::int64_t> last_checkpoint_ns_;
  MicroUsd checkpoint_spent_ = 0;                    ///< spend when the last checkpoint was seen
  std::optional<std::int64_t> checkpoint_mtime_ns_;  ///< newest mtime matching --checkpoint-glob
  bool gap_warned_ = false;
};

}  // namespace gm::guard
