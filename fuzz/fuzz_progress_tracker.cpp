// libFuzzer target: random sequences of progress-bar lines (tqdm with and without totals, positions, elapsed
// times, units and epoch numbers in descriptions; rich.progress; Keras; "Epoch e/E" lines; tqdm's erase;
// Trainer log dicts) on both streams, at increasing times, fed to the tracker through the public API (issue
// 26). After every update the invariants hold: 0 <= step <= total; a missing total is explained; the step
// never goes back unless the update announces a nesting change; and a forecaster fed like the supervisor
// feeds it never forecasts below the spend, nor an interval that collapses onto the spend with work left.
#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "guard/guard.h"
#include "meter/run_meter.h"

/// Aborts (a finding) naming the invariant that failed.
#define TRACKER_CHECK(cond)                                                      \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "invariant failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

namespace {

/// Reads bytes of the input as small choices.
class Choices {
 public:
  Choices(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  unsigned next(unsigned n) { return n == 0 || pos_ >= size_ ? 0 : data_[pos_++] % n; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

const char* const kDescriptions[] = {
    "",    "epoch", "epoch 0", "epoch 1", "Epoch 2/3", "Epoch 1", "train",  "val",
    "ep0", "ep1",   "fold",    "batch",   "rank 0",    "rank 1",  "Epochs", "Sanity Checking DataLoader 0"};
const char* const kUnits[] = {"it", "samples", "img"};
const std::int64_t kTotals[] = {1, 2, 3, 4, 6, 10, 50, 60, 100, 1000};

std::string clock_text(int s) {
  return fmt::format("{:02d}:{:02d}", s / 60, s % 60);
}

/// One line of output (without its terminator) chosen by the input.
std::string make_line(Choices& c) {
  const std::string desc = kDescriptions[c.next(16)];
  const std::int64_t total = kTotals[c.next(10)];
  const std::int64_t n = c.next(4) == 0 ? total : static_cast<std::int64_t>(c.next(256)) % (total + 1);
  const std::string unit = kUnits[c.next(3)];
  const int elapsed = static_cast<int>(c.next(64));
  const unsigned position = c.next(4);
  std::string up;
  for (unsigned i = 0; i < position; ++i) up += "\x1b[A";
  const std::string prefix = desc.empty() ? "" : desc + ": ";
  switch (c.next(9)) {
    case 0:
    case 1:
    case 2:  // tqdm with a total
      return fmt::format("{}{:3d}%|#####     | {}/{} [{}<{}, 9.9{}/s, loss=0.{}]{}", prefix, n * 100 / total,
                         n, total, clock_text(elapsed), clock_text(63 - elapsed), unit, c.next(100), up);
    case 3:  // tqdm without a total
      return fmt::format("{}{}{} [{}, 9.9{}/s]{}", prefix, n, unit, clock_text(elapsed), unit, up);
    case 4:  // rich.progress, M/N or a percentage
      return c.next(2) ? fmt::format("{} ━━━━╺━━━━ {}/{} 0:00:0{}", desc, n, total, c.next(10))
                       : fmt::format("{} ━━━━╺━━━━ {:3d}% 0:00:0{}", desc, n * 100 / total, c.next(10));
    case 5:  // Keras
      return fmt::format("{}/{} [====>.....] - ETA: {}s - loss: 0.{}", n, total, c.next(9), c.next(100));
    case 6:  // tqdm erasing a bar
      return std::string(1 + c.next(40), ' ') + up;
    case 7:  // "Epoch e/E" line, or a summary
      return fmt::format("Epoch {}/{}{}", c.next(5), 1 + c.next(4), c.next(2) ? ": loss=0.5" : "");
    default:  // a Trainer log dict
      return fmt::format("{{'loss': 0.{}, 'learning_rate': 5e-05, 'epoch': 0.{}}}", c.next(100), c.next(100));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Choices c(data, size);
  const bool verbose = std::getenv("TRACKER_FUZZ_VERBOSE") != nullptr;
  gm::guard::OutputProgressParser parser;
  gm::meter::Forecaster forecaster;
  double now_s = 0;
  std::optional<std::int64_t> last_step;
  for (int lines = 0; !c.empty() && lines < 2000; ++lines) {
    now_s += 0.01 * static_cast<double>(c.next(50));
    const unsigned stream = c.next(2);
    const std::string line = make_line(c) + (c.next(2) ? "\r" : "\n");
    if (verbose) std::fprintf(stderr, "%.2f %u %s\n", now_s, stream, line.c_str());
    for (const auto& u : parser.feed(line, now_s, stream)) {
      if (verbose)
        std::fprintf(stderr, "  -> step %lld total %lld%s %s\n",
                     u.step ? static_cast<long long>(*u.step) : -1,
                     u.total_steps ? static_cast<long long>(*u.total_steps) : -1,
                     u.nesting_changed ? " CHANGED" : "", u.ambiguity ? u.ambiguity->c_str() : "");
      for (const auto& [k, v] : u.metrics) TRACKER_CHECK(std::isfinite(v));
      TRACKER_CHECK(!u.samples && !u.tokens);
      if (u.nesting_changed) forecaster = gm::meter::Forecaster();
      if (!u.step) {
        TRACKER_CHECK(!u.total_steps);
        continue;
      }
      TRACKER_CHECK(*u.step >= 0);
      if (u.total_steps) {
        TRACKER_CHECK(*u.total_steps > 0);
        TRACKER_CHECK(*u.step <= *u.total_steps);
      } else {
        TRACKER_CHECK(u.ambiguity.has_value() && !u.ambiguity->empty());  // says why, never invents a total
      }
      if (last_step && !u.nesting_changed) TRACKER_CHECK(*u.step >= *last_step);
      last_step = u.step;
      forecaster.add(now_s, *u.step, u.total_steps);
      const double spent = now_s * 2.0;
      if (auto f = forecaster.forecast(now_s, spent, 2.0)) {
        TRACKER_CHECK(std::isfinite(f->total_usd) && std::isfinite(f->low_usd) && std::isfinite(f->high_usd));
        TRACKER_CHECK(f->low_usd >= spent);
        TRACKER_CHECK(f->total_usd >= f->low_usd && f->high_usd >= f->total_usd);
        if (f->step < f->total_steps) TRACKER_CHECK(f->high_usd > spent);
        TRACKER_CHECK(f->step <= f->total_steps);
      }
    }
  }
  return 0;
}
