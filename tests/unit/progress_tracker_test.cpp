// Global progress from nested and side bars in a job's output (issue 19): epoch × step bars, throttled outer
// bars, Trainer evaluation bars, Lightning epochs, Keras/accelerate "Epoch e/E" lines, ANSI cursor moves.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "guard/guard.h"
#include "report/live_render.h"

namespace gm {
namespace {

/// Feeds lines and returns the last global step/total seen.
struct Feed {
  guard::OutputProgressParser parser;
  std::vector<guard::ProgressUpdate> updates;
  /// Feeds `text` and ends its last line (tqdm ends a redraw with the next one's '\r').
  void operator()(const std::string& text) {
    for (auto& u : parser.feed(text + "\r")) updates.push_back(u);
  }
  std::int64_t step() const {
    for (auto it = updates.rbegin(); it != updates.rend(); ++it)
      if (it->step) return *it->step;
    return -1;
  }
  std::optional<std::int64_t> total() const {
    for (auto it = updates.rbegin(); it != updates.rend(); ++it)
      if (it->step) return it->total_steps;
    return std::nullopt;
  }
};

std::string bar(const std::string& desc, int n, int total) {
  return fmt::format("\r{}{:3d}%|          | {}/{} [00:01<00:02, 9.9it/s]", desc.empty() ? "" : desc + ": ",
                     n * 100 / total, n, total);
}

TEST(ProgressTrackerTest, EpochBarAroundStepBarIsOuterTimesInner) {
  Feed f;
  f(bar("epoch", 0, 3) + "\n");
  std::int64_t last = -1;
  for (int e = 0; e < 3; ++e) {
    for (int i = 0; i <= 100; i += 4) {
      f(bar("", i, 100) + "\x1b[A");
      EXPECT_GE(f.step(), last) << "epoch " << e << " step " << i;
      last = f.step();
      EXPECT_EQ(f.total(), 300);
    }
    f("\r                    \x1b[A");  // leave=False clears the inner bar
    f(bar("epoch", e + 1, 3));
    EXPECT_EQ(f.step(), (e + 1) * 100);
  }
  EXPECT_EQ(f.step(), 300);
}

TEST(ProgressTrackerTest, ThrottledOuterBarIsAdvancedByInnerRestarts) {
  Feed f;
  f(bar("epoch", 0, 4) + "\n");
  for (int e = 0; e < 3; ++e)
    for (int i = 0; i <= 50; i += 10) f(bar("", i, 50));  // the outer bar never redraws (mininterval)
  EXPECT_EQ(f.step(), 2 * 50 + 50);
  EXPECT_EQ(f.total(), 200);
}

TEST(ProgressTrackerTest, TrainerEvaluationBarIsASideBar) {
  Feed f;
  for (int s = 0; s <= 45; s += 5) f(bar("", s, 300));
  for (int i = 0; i <= 20; i += 5) f(bar("", i, 20));  // evaluation inside the training bar
  EXPECT_EQ(f.step(), 45);
  EXPECT_EQ(f.total(), 300);
  f("{'eval_loss': 0.91, 'epoch': 0.45}\n");
  EXPECT_DOUBLE_EQ(f.updates.back().metrics.at("eval_loss"), 0.91);
  f(bar("", 50, 300));
  EXPECT_EQ(f.step(), 50);
  EXPECT_EQ(f.total(), 300);
}

TEST(ProgressTrackerTest, LightningEpochBarsCountAcrossEpochs) {
  Feed f;
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i <= 100; i += 25)
      f(bar(fmt::format("Epoch {}", e), i, 100).append(", loss=0.5, v_num=0]"));
    for (int i = 0; i <= 10; i += 5) f(bar("Validation DataLoader 0", i, 10));
  }
  EXPECT_EQ(f.step(), 1 * 100 + 100);
  EXPECT_FALSE(f.total()) << "the epoch count is not printed: no made-up total";
}

TEST(ProgressTrackerTest, KerasAndAccelerateEpochLines) {
  Feed f;
  for (int e = 1; e <= 3; ++e) {
    f(fmt::format("Epoch {}/3\n", e));
    for (int i = 0; i <= 40; i += 10) f(fmt::format("{}/40 [==========] - ETA: 1s - loss: 0.5\r", i));
  }
  EXPECT_EQ(f.step(), 2 * 40 + 40);
  EXPECT_EQ(f.total(), 120);
  Feed g;
  g("Epoch 2/3:  50%|#####     | 20/40 [00:02<00:02, 9.9it/s]\n");
  EXPECT_EQ(g.step(), 1 * 40 + 20) << "\"Epoch 2/3\" in a description is 1-based";
  EXPECT_EQ(g.total(), 120);
}

TEST(ProgressTrackerTest, SingleBarIsUnchanged) {
  Feed f;
  f(" 37%|###       | 37/100 [00:03<00:06, 10.0it/s]\n");
  EXPECT_EQ(f.step(), 37);
  EXPECT_EQ(f.total(), 100);
  auto r = guard::parse_bar_line("\x1b[32mtrain:  45%|####5     | 45/100 [00:01<00:02, 30.1it/s]\x1b[0m");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->key, "train");
  EXPECT_EQ(*r->n, 45);
}

TEST(StatusLineTest, NarrowTerminalDropsWholeFieldsLeastImportantFirst) {
  guard::StatusSnapshot s;
  s.elapsed_s = 754;
  s.spent_micros = 12'340'000;
  s.burn_usd_per_h = 98.7;
  s.step = 4500;
  s.total_steps = 10000;
  meter::Forecast f;
  f.total_usd = 27.4;
  f.low_usd = 26.1;
  f.high_usd = 29.0;
  f.remaining_s = 900;
  s.forecast = f;
  s.budget_left_micros = 27'660'000;
  for (unsigned i = 0; i < 2; ++i) {
    gpu::DeviceSample d;
    d.index = i;
    d.utilization_pct = 97;
    d.memory_used_bytes = 61ull << 30;
    d.power_mw = 650'000;
    s.gpus.push_back(d);
  }
  s.stopping = true;
  const std::string wide = report::render_status_line(s, 400);
  EXPECT_NE(wide.find("GPU1 97%"), std::string::npos) << wide;
  const std::string line = report::render_status_line(s, 80);
  std::size_t cols = 0;
  for (unsigned char c : line) cols += (c & 0xc0) != 0x80;
  EXPECT_LE(cols, 80u) << line;
  for (const char* must : {"$12.34", "budget left $27", "ETA 15m 00s", "STOPPING"})
    EXPECT_NE(line.find(must), std::string::npos) << must << " in: " << line;
  const std::string wider = report::render_status_line(s, 120);
  for (const char* must : {"forecast $27", "step 4500/10000", "ETA 15m 00s", "STOPPING"})
    EXPECT_NE(wider.find(must), std::string::npos) << must << " in: " << wider;
  EXPECT_EQ(line.find("GPU1"), std::string::npos) << "GPU details go first: " << line;
}

// Issue 37: tensor-core activity next to utilization, and MFU live.
TEST(StatusLineTest, ShowsTensorActivityNextToUtilAndMfu) {
  guard::StatusSnapshot s;
  s.elapsed_s = 60;
  s.spent_micros = 1'000'000;
  s.mfu = 0.31;
  gpu::DeviceSample bf16;
  bf16.index = 0;
  bf16.utilization_pct = 98;
  bf16.gpm.tensor_active_pct = 86.3;
  gpu::DeviceSample fp32;
  fp32.index = 1;
  fp32.utilization_pct = 100;
  fp32.gpm.tensor_active_pct = 0.0;
  gpu::DeviceSample old;  // no GPM: nothing is made up
  old.index = 2;
  old.utilization_pct = 90;
  s.gpus = {bf16, fp32, old};
  const std::string line = report::render_status_line(s, 400);
  EXPECT_NE(line.find("GPU0 98% tensor 86%"), std::string::npos) << line;
  EXPECT_NE(line.find("GPU1 100% tensor 0%"), std::string::npos) << line;
  EXPECT_NE(line.find("GPU2 90%"), std::string::npos) << line;
  EXPECT_EQ(line.find("GPU2 90% tensor"), std::string::npos) << line;
  EXPECT_NE(line.find("MFU 31%"), std::string::npos) << line;
}

}  // namespace
}  // namespace gm
