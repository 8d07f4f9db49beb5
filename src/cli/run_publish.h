#pragma once
// A run's live view for the node agent (docs/agent.md "Runs"): a SessionSink that forwards everything to the
// run's own sink and publishes the status (run id, --target forecast) in the runs directory the agent reads.
#include <cstdint>
#include <optional>
#include <string>

#include "guard/session.h"

namespace gm::cli {

/// Where runs publish their views: $GPUMETER_RUNS_DIR when set (created when missing), else
/// /run/gpumeter/runs when that directory exists; nullopt: the run publishes nothing.
std::optional<std::string> run_publish_dir();

/// Forwards every call to `inner`; at each status (at most once a second, and at once when the target's
/// verdict, the budget or the stopping state changes) writes the run's view to `dir` — its id, command,
/// socket, spend, rate, budget, steps and forecast — and withdraws it when destroyed. A failure to write
/// warns once through `inner` and never touches the job.
class PublishingSink final : public guard::SessionSink {
 public:
  PublishingSink(guard::SessionSink& inner, std::string dir, std::string command);
  ~PublishingSink() override;
  PublishingSink(const PublishingSink&) = delete;
  PublishingSink& operator=(const PublishingSink&) = delete;

  void job_started() override { inner_.job_started(); }
  void job_output(guard::JobStream stream, std::string_view bytes) override {
    inner_.job_output(stream, bytes);
  }
  void message(const std::string& text, bool warning) override { inner_.message(text, warning); }
  void status(const guard::StatusSnapshot& snapshot, bool periodic) override;
  std::optional<std::pair<unsigned short, unsigned short>> resized() override { return inner_.resized(); }
  void session_started(std::int64_t run_id, const std::string& socket_path,
                       std::int64_t start_unix_ms) override;
  void action(const store::ActionRecord& action) override { inner_.action(action); }
  void cell(const store::CellRecord& cell) override { inner_.cell(cell); }

 private:
  guard::SessionSink& inner_;
  std::string dir_;
  std::string command_;
  std::string socket_;
  std::int64_t run_id_ = 0;
  std::int64_t start_unix_ms_ = 0;
  std::int64_t published_unix_ms_ = 0;
  std::optional<int> published_verdict_;
  std::optional<MicroUsd> published_budget_;
  bool published_stopping_ = false;
  bool published_ = false;
  bool warned_ = false;
};

/// The sink a session is handed: `inner`, wrapped in a PublishingSink when runs publish here
/// (run_publish_dir()); the view is withdrawn when this is destroyed.
class PublishedSession {
 public:
  PublishedSession(guard::SessionSink& inner, std::string command);
  guard::SessionSink& sink() { return publishing_ ? static_cast<guard::SessionSink&>(*publishing_) : inner_; }

 private:
  guard::SessionSink& inner_;
  std::optional<PublishingSink> publishing_;
};

}  // namespace gm::cli
