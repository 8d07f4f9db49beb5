#pragma once
// What `gpumeter top` draws: the devices, their recent history, the owners and their findings, as lines of
// text for both the curses view and the plain output.
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent.h"

namespace gm::report {

/// The owners' order in `top`.
enum class TopSort { rate, cost, owner, energy };

/// The last samples of each device, for the history lines: utilization and the $/h its processes used.
class TopHistory {
 public:
  static constexpr std::size_t kPoints = 40;
  void update(const agent::Snapshot& s, std::int64_t now_ns);
  /// "GPU n  util <sparkline> now  $/h used <sparkline> now" per device.
  std::vector<std::string> lines(const agent::Snapshot& s) const;

 private:
  struct Series {
    std::deque<std::optional<double>> util, used_usd_per_hour;
    MicroUsd last_used = 0;
    bool have_used = false;
  };
  static void push(std::deque<std::optional<double>>& q, std::optional<double> v);
  /// ASCII levels (a terminal without UTF-8 draws them too); '?' where the value was not readable.
  static std::string spark(const std::deque<std::optional<double>>& q, double max);
  static std::string last_percent(const std::deque<std::optional<double>>& q);
  static std::string last_usd(const std::deque<std::optional<double>>& q);
  std::map<unsigned, Series> devices_;
  std::uint64_t collections_ = 0;
  std::int64_t last_ns_ = 0;
};

/// The screen as lines of text (`interactive`: the key help in the title).
std::vector<std::string> render_top_lines(const agent::Snapshot& s, TopSort key, bool interactive,
                                          const TopHistory& history);

}  // namespace gm::report
