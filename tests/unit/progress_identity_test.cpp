// Bar identity and the tracker's invariants (issue 26): real tqdm output captured in tests/data/progress
// (the issue's layout, two processes printing, the Trainer's evaluation bar and tqdm.write), parallel bars,
// lagging copies, renamed bars, erased bars, unknown totals, rich.progress and Keras lines, a short first bar
// replaced, and what the status line says when the progress is ambiguous.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "guard/guard.h"
#include "report/live_render.h"
#include "support/support.h"

namespace gm {
namespace {

/// Feeds output and checks the invariants of every update: step <= total, a missing total explained, no
/// step back unless a nesting change is announced.
struct Tracked {
  guard::OutputProgressParser parser;
  std::vector<guard::ProgressUpdate> updates;
  std::optional<std::int64_t> last;
  int changes = 0;
  void feed(const std::string& text, double now_s = 0, unsigned stream = 1) {
    for (auto& u : parser.feed(text, now_s, stream)) {
      if (u.step) {
        if (u.total_steps) {
          EXPECT_LE(*u.step, *u.total_steps);
        } else {
          EXPECT_TRUE(u.ambiguity) << "a missing total is explained";
        }
        if (u.nesting_changed) {
          ++changes;
        } else if (last) {
          EXPECT_GE(*u.step, *last) << "no step back unannounced";
        }
        last = u.step;
      }
      updates.push_back(std::move(u));
    }
  }
  std::optional<std::int64_t> step() const {
    for (auto it = updates.rbegin(); it != updates.rend(); ++it)
      if (it->step) return it->step;
    return std::nullopt;
  }
  std::optional<std::int64_t> total() const {
    for (auto it = updates.rbegin(); it != updates.rend(); ++it)
      if (it->step) return it->total_steps;
    return std::nullopt;
  }
};

std::string bar(const std::string& desc, std::int64_t n, std::int64_t total, int elapsed_s = 0,
                int position = 0) {
  std::string up;
  for (int i = 0; i < position; ++i) up += "\x1b[A";
  return fmt::format("\r{}{:3d}%|          | {}/{} [00:{:02d}<00:02, 9.9it/s]{}",
                     desc.empty() ? "" : desc + ": ", n * 100 / total, n, total, elapsed_s, up);
}

TEST(ProgressIdentityTest, IssueLayoutFromRealTqdmIsOneHundredEightySteps) {
  // trange(3, desc="epoch") around tqdm(range(60), desc=f"epoch {ep}", leave=False), as tqdm 4.64 prints it.
  Tracked t;
  t.feed(test::read_file(test::source_dir() + "/tests/data/progress/tqdm_issue_layout.txt"));
  EXPECT_EQ(t.step(), 180);
  EXPECT_EQ(t.total(), 180);
  for (const auto& u : t.updates) {
    if (u.step && u.step > 0) {
      EXPECT_EQ(u.total_steps, 180) << "never the outer bar's 3 as the work";
    }
  }
}

TEST(ProgressIdentityTest, TwoProcessesWithABarEachAreParallelNotNested) {
  // Two ranks, tqdm(range(100), desc="train", position=rank), interleaved on one stream.
  Tracked t;
  t.feed(test::read_file(test::source_dir() + "/tests/data/progress/tqdm_two_ranks.txt"));
  EXPECT_EQ(t.step(), 100);
  EXPECT_EQ(t.total(), 100);
}

TEST(ProgressIdentityTest, TwoRanksInLockstepEndAtTheirLastStep) {
  // Two processes, each tqdm(range(180), desc="train", position=rank) on the same timeline, printed to one
  // stream (tests/progress/layouts.py's ranks_parallel_bars, recorded under `gpumeter run` with five other
  // layouts beside it; tqdm 4.64). Both bars stood at 178 when both ranks closed: tqdm draws a closing bar at
  // the cursor (position 0), not at its position, so the second closing line looks like rank 0's finished
  // bar again. It is rank 1's: its bar at position 1 was left behind.
  Tracked t;
  t.feed(test::read_file(test::source_dir() + "/tests/data/progress/tqdm_two_ranks_lockstep.txt"));
  EXPECT_EQ(t.step(), 180);
  EXPECT_EQ(t.total(), 180);
}

TEST(ProgressIdentityTest, TrainerEvaluationBarAndTqdmWriteKeepTheStepBar) {
  Tracked t;
  t.feed(test::read_file(test::source_dir() + "/tests/data/progress/tqdm_trainer_eval_write.txt"));
  EXPECT_EQ(t.step(), 90);
  EXPECT_EQ(t.total(), 90);
  EXPECT_EQ(t.changes, 0);
}

TEST(ProgressIdentityTest, AnOuterBarAdvancingMidPassOfABarThatGoesOnIsNotItsLoop) {
  Tracked t;
  t.feed(bar("a", 0, 50) + "\n" + bar("b", 0, 50, 0, 1) + "\n");
  EXPECT_EQ(t.total(), 2500) << "provisionally nested";
  t.feed(bar("a", 5, 50) + "\n" + bar("b", 6, 50, 0, 1) + "\n" + bar("a", 10, 50) + "\n");
  EXPECT_EQ(t.step(), 10);
  EXPECT_EQ(t.total(), 50) << "b went on where it was: the two are parallel";
  EXPECT_GE(t.changes, 1) << "the revision is announced";
}

TEST(ProgressIdentityTest, ALaggingCopyIsNotARestart) {
  Tracked t;
  t.feed(bar("epoch", 0, 3) + "\n");
  t.feed(bar("", 0, 100, 0, 1) + "\n" + bar("", 40, 100, 1, 1) + "\n");
  t.feed(bar("", 38, 100, 1, 1) + "\n");  // another process's copy, a little behind: same elapsed time
  EXPECT_EQ(t.step(), 40);
  t.feed(bar("", 0, 100, 0, 1) + "\n" + bar("", 10, 100, 0, 1) + "\n");  // a real restart: 0, elapsed reset
  EXPECT_EQ(t.step(), 110);
}

TEST(ProgressIdentityTest, ARenamedBarIsTheSameBar) {
  Tracked t;
  t.feed(bar("", 0, 3) + "\n" + bar("epoch 0", 0, 3) + "\n");  // set_description right after the start
  t.feed(bar("batch", 0, 60, 0, 1) + "\n" + bar("batch", 60, 60, 1, 1) + "\n");
  t.feed(bar("epoch 1", 1, 3, 1) + "\n" + bar("batch", 0, 60, 0, 1) + "\n");
  EXPECT_EQ(t.step(), 60);
  EXPECT_EQ(t.total(), 180);
}

TEST(ProgressIdentityTest, AnErasedInnerBarCountsItsPassOnce) {
  Tracked t;
  t.feed(bar("epoch", 0, 3) + "\n");
  t.feed(bar("step", 0, 10, 0, 1) + "\n" + bar("step", 9, 10, 1, 1) + "\n" + "\r          \x1b[A\n");
  t.feed(bar("step", 0, 10, 0, 1) + "\n");  // the outer bar did not redraw: the pass is counted
  EXPECT_EQ(t.step(), 10);
  t.feed(bar("epoch", 1, 3, 1) + "\n" + bar("step", 3, 10, 0, 1) + "\n");
  EXPECT_EQ(t.step(), 13) << "the outer bar's own count, not once more";
}

TEST(ProgressIdentityTest, AnUnknownInnerTotalIsLearnedFromItsFirstPass) {
  Tracked t;
  t.feed(bar("epoch", 0, 4) + "\n");
  for (int i = 0; i <= 40; i += 10) t.feed(fmt::format("\rbatch: {}it [00:00, 9.9it/s]\x1b[A\n", i));
  EXPECT_FALSE(t.total()) << "no total before the inner loop's length is known";
  ASSERT_TRUE(t.updates.back().ambiguity);
  t.feed("\rbatch: 45it [00:01, 9.9it/s]\n");  // leave=True: the final count at position 0
  t.feed(bar("epoch", 1, 4, 1) + "\n" + "\rbatch: 0it [00:00, ?it/s]\x1b[A\n");
  EXPECT_EQ(t.step(), 45);
  EXPECT_EQ(t.total(), 180);
}

TEST(ProgressIdentityTest, RichAndKerasLines) {
  auto mofn = guard::parse_bar_line(
      "\x1b[2Ktrain (epoch 2) \x1b[91m━━━━━━━━╺━━━━\x1b[0m \x1b[32m45/60\x1b[0m 0:00:01");
  ASSERT_TRUE(mofn);
  EXPECT_EQ(mofn->key, "train (epoch #)");
  EXPECT_EQ(mofn->n, 45);
  EXPECT_EQ(mofn->total, 60);
  auto pct = guard::parse_bar_line("train ━━━━━━━━━━━━━━━━━━╺━━━━━━━━━━━━━━━━━━━━━  45% 0:00:01");
  ASSERT_TRUE(pct);
  EXPECT_EQ(pct->n, 45);
  EXPECT_EQ(pct->total, 100);
  EXPECT_EQ(pct->unit, "%");
  EXPECT_FALSE(guard::parse_bar_line("a ━━ b 3/4 c")) << "two glyphs are not a bar";
  auto keras = guard::parse_bar_line(
      "60/60 [==============================] - 2s 33ms/step - loss: 0.4123 - accuracy: 0.87");
  ASSERT_TRUE(keras);
  EXPECT_EQ(keras->n, 60);
  EXPECT_DOUBLE_EQ(keras->metrics.at("loss"), 0.4123);
  EXPECT_DOUBLE_EQ(keras->metrics.at("accuracy"), 0.87);
  auto unknown = guard::parse_bar_line("train: 1234samples [00:12, 99.5samples/s]\x1b[A\x1b[A");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->n, 1234);
  EXPECT_FALSE(unknown->total);
  EXPECT_EQ(unknown->unit, "samples");
  EXPECT_EQ(unknown->position, 2);
  EXPECT_DOUBLE_EQ(*unknown->elapsed_s, 12);
  auto tqdm = guard::parse_bar_line("ep1:  40%|####      | 24/60 [01:02:03<00:02, 1.5s/it]");
  ASSERT_TRUE(tqdm);
  EXPECT_EQ(tqdm->key, "ep#");
  EXPECT_EQ(tqdm->unit, "it");
  EXPECT_DOUBLE_EQ(*tqdm->elapsed_s, 3723);
}

TEST(ProgressIdentityTest, AShortFirstBarIsReplacedByTheMainOneAndALateSideBarIsNot) {
  Tracked t;
  t.feed(bar("Sanity Checking DataLoader 0", 0, 2) + "\n", 0.0);
  t.feed(bar("Sanity Checking DataLoader 0", 2, 2) + "\n", 0.2);
  for (int i = 0; i <= 50; i += 10) t.feed(bar("Epoch 0", i, 100) + "\n", 0.3 + i * 0.01);
  EXPECT_EQ(t.step(), 50) << "the epoch bar ran longer than the sanity check: it is the work";
  EXPECT_EQ(t.changes, 1);
  t.feed(bar("Epoch 0", 100, 100) + "\n", 2.0);
  t.feed(bar("test", 0, 20) + "\n" + bar("test", 20, 20) + "\n", 2.5);
  EXPECT_EQ(t.step(), 100) << "a short bar after the work is a side bar";
}

TEST(ProgressIdentityTest, AnEpochSummaryAfterItsBarDoesNotRewind) {
  Tracked t;
  for (int e = 1; e <= 3; ++e) {
    for (int i = 0; i <= 60; i += 20) t.feed(bar(fmt::format("epoch {}/3", e), i, 60) + "\n");
    t.feed(fmt::format("epoch {}/3: train_loss=0.51 val_acc=0.8\n", e), 0, 0);
  }
  EXPECT_EQ(t.step(), 180);
  EXPECT_EQ(t.total(), 180);
}

TEST(ProgressIdentityTest, StatusLineSaysWhenTheTotalIsUnknown) {
  guard::StatusSnapshot s;
  s.elapsed_s = 12;
  s.spent_micros = 12 * util::kMicrosPerUsd;
  s.step = 45;
  s.progress_note = "total unknown";
  const std::string line = report::render_status_line(s, 200);
  EXPECT_NE(line.find("step 45 (total unknown)"), std::string::npos) << line;
  EXPECT_EQ(line.find("forecast"), std::string::npos) << line;
}

TEST(ProgressIdentityTest, ForecastIsWithheldWithoutATimePerStepAndNeverBelowTheSpend) {
  meter::Forecaster f;
  for (int s = 0; s <= 10; ++s) f.add(5.0, s, 100);  // every report at the same instant
  EXPECT_FALSE(f.forecast(5.0, 5.0, 1.0)) << "steps left but no time measured: no forecast";
  meter::Forecaster g;
  for (int s = 0; s <= 99; ++s) g.add(s * 0.1, s, 100);
  auto fc = g.forecast(9.9, 9.9, 1.0);
  ASSERT_TRUE(fc);
  EXPECT_GE(fc->low_usd, 9.9);
  EXPECT_GT(fc->high_usd, 9.9) << "one step left: the interval does not collapse onto the spend";
}

}  // namespace
}  // namespace gm
