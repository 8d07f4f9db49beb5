#pragma once
// The idle_gpus_held finding of an attached session (`gpumeter attach --max-idle`): every allocated GPU under
// kIdleUtilPct for the threshold while a process of the job holds memory on one. Recorded once per stretch;
// no action is taken.
#include <cstdint>
#include <optional>

#include "guard/run_state.h"

namespace gm::guard {

class IdleHeldWatch final : public Collaborator {
 public:
  explicit IdleHeldWatch(RunState& state) : st_(state) {}
  void on_interval(const Tick& tick) override;
  void fill(StatusSnapshot& snapshot) const override;

 private:
  RunState& st_;
  std::optional<std::int64_t> idle_held_ms_;  ///< current stretch of idle GPUs with memory held
  bool recorded_ = false;
};

}  // namespace gm::guard
