#pragma once
// The supervisor of `gpumeter run` and `gpumeter attach`: a state machine without file descriptors that
// consumes events (time, progress, job output, signal, notice, scrape, exit) and sequences the run's
// collaborators — metering and the budget policy of its own, then checkpoints and notices, notebook cells
// and control, team budgets, idle-held GPUs, serving counters and progress (guard/<feature>.h) — records
// to the ledger and acts on the job through the ProcessRunner seam. The drivers in guard/session.h feed it.
#include <memory>
#include <string_view>

#include "guard/session.h"

namespace gm::guard {

/// The supervisor state machine (no descriptors): the driver, or a test, feeds it events in time order.
class Supervisor {
 public:
  Supervisor(const SessionConfig& config, gpu::GpuBackend* backend, store::Ledger* ledger,
             const catalog::Catalog* catalog, util::Clock& clock, sys::ProcessRunner& runner,
             SessionSink& sink);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Opens the run (ledger row) now; call before the job starts. Returns the run id (0 when not recorded).
  std::int64_t begin();
  /// The job could not be started (`error.kind` not_found: 127, else 126); the run is recorded as failed.
  void start_failed(const Error& error);
  /// The job started with this main process (also its process group id).
  void started(pid_t pid);
  /// A progress datagram arrived (or failed to parse).
  void on_datagram(std::string_view datagram);
  /// The job wrote output: passed to the sink and scanned for progress.
  void on_output(JobStream stream, std::string_view bytes);
  /// A signal reached gpumeter (INT, TERM, HUP, QUIT): forwarded to the job like a stop.
  void on_signal(int sig);
  /// Time passed: samples when a tick is due, SIGKILLs after the grace period. Call at next_wake_ns().
  void on_time();
  /// A scrape of the wrapped server's engine metrics arrived (folded into the run's counters at the tick).
  void on_inference(const serving::InferenceScrape& scrape);
  /// The metadata service gave a notice: a stop notice sends the stop signal at once (SIGKILL after the
  /// grace or kPreemptionKillMarginMs before the deadline, whichever first) and the run ends "preempted";
  /// a warning is recorded and notified.
  void on_notice(const cloud::CloudNotice& notice);
  /// The job's main process exited with this wait status.
  void on_exit(int wait_status);
  /// attach: gpumeter stops watching a job that still runs (SIGINT / SIGTERM to gpumeter).
  void on_detach();
  /// When on_time must run next (monotonic ns).
  std::int64_t next_wake_ns() const;
  /// True once the job has exited.
  bool done() const { return exited_; }
  /// Final figures, ledger row and report; call once after on_exit.
  SessionOutcome finish();
  /// The status now.
  StatusSnapshot snapshot() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool exited_ = false;
};

}  // namespace gm::guard
