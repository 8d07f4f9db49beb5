// Money has one owner (issue 36): meter's dollar rules give exactly the figures the modules computed on their
// own before, and every dollar text goes through the one exact parser.
#include <gtest/gtest.h>

#include "agent/node_guard.h"
#include "guard/session.h"
#include "meter/meter.h"
#include "meter/run_meter.h"
#include "util/money.h"

namespace gm {
namespace {

TEST(MoneyOwner, BurnRateIsThePriceOfTheGpusPerSecond) {
  // The three burn rates of before: RunMeter (price × GPUs / 3600.0), the supervisor without telemetry
  // (price / 3600.0) and the HTML report's band (price × max(1, GPUs) / 3600).
  for (MicroUsd p :
       {MicroUsd{0}, MicroUsd{1}, MicroUsd{3'600'000}, MicroUsd{2'499'999}, MicroUsd{98'320'001}}) {
    EXPECT_EQ(meter::burn_usd_per_s(p, 1), util::micros_to_usd(p) / 3600.0);
    for (std::size_t n : {1u, 2u, 8u})
      EXPECT_EQ(meter::burn_usd_per_s(p, n), util::micros_to_usd(p) * static_cast<double>(n) / 3600.0);
  }
  EXPECT_EQ(meter::usd_per_hour_of_burn(meter::burn_usd_per_s(3'600'000, 2)),
            meter::burn_usd_per_s(3'600'000, 2) * 3600.0);
  EXPECT_DOUBLE_EQ(meter::usd_per_hour_of_burn(meter::burn_usd_per_s(3'600'000, 2)), 7.2);
  EXPECT_DOUBLE_EQ(meter::usd_over_ms(2.0, 1500), 3.0);
}

TEST(MoneyOwner, MigShareBySlicesElseMemory) {
  gpu::MigInstance m;
  m.slice_count = 3;
  m.board_slices = 7;
  EXPECT_EQ(meter::mig_micros_per_hour(7'000'001, m, std::nullopt),
            MicroUsd{3'000'000});  // floor of 21000003 / 7
  m.slice_count.reset();
  m.memory_total_bytes = 20ULL << 30;
  EXPECT_EQ(meter::mig_micros_per_hour(8'000'000, m, 80ULL << 30), MicroUsd{2'000'000});
  EXPECT_FALSE(meter::mig_micros_per_hour(8'000'000, m, std::nullopt).has_value());
  m.memory_total_bytes.reset();
  EXPECT_FALSE(meter::mig_share(m, 80ULL << 30).has_value());
}

TEST(MoneyOwner, EqualSplitGivesTheRemainderToTheFirstParts) {
  // What the FOCUS rows and the agent's pod holders did by hand: total / n, plus one to the first total % n.
  for (MicroUsd total : {MicroUsd{0}, MicroUsd{1}, MicroUsd{10}, MicroUsd{1'000'003}})
    for (std::size_t n : {1u, 2u, 3u, 7u}) {
      const auto parts = meter::split_equally(total, n);
      ASSERT_EQ(parts.size(), n);
      const auto ni = static_cast<MicroUsd>(n);
      for (std::size_t k = 0; k < n; ++k)
        EXPECT_EQ(parts[k], total / ni + (static_cast<MicroUsd>(k) < total % ni ? 1 : 0))
            << total << "/" << n;
    }
}

TEST(MoneyOwner, WasteSharesAndProjections) {
  EXPECT_EQ(meter::waste_micros(3, 4), 7);
  EXPECT_EQ(meter::busy_micros(10, 7), 3);
  EXPECT_EQ(meter::busy_micros(5, 7), 0);
  EXPECT_TRUE(meter::share_over(21, 100, 5));
  EXPECT_FALSE(meter::share_over(20, 100, 5));
  EXPECT_TRUE(meter::share_under(4, 100, 20));
  EXPECT_FALSE(meter::share_under(5, 100, 20));
  EXPECT_EQ(meter::idle_part_micros(1000, 30), 700);
  EXPECT_EQ(meter::idle_part_micros(1000, 130), 0);
  // Start-up 100, run 1100 after 10 of 30 steps: the 1000 after start-up per 10 steps, 3000 for all.
  EXPECT_EQ(meter::projected_total_micros(100, 1100, 10, 30), 3100);
  EXPECT_TRUE(meter::cost_within_increase(1'000'000, 1'200'000, 20));
  EXPECT_FALSE(meter::cost_within_increase(1'000'000, 1'200'001, 20));
  EXPECT_EQ(meter::usd_per_1k(2.0, 4), 500.0);
  EXPECT_EQ(meter::usd_per_million(3.0, 1.5e6), 2.0);
}

TEST(MoneyOwner, ForecastSpreadAndBand) {
  meter::Forecast f;
  f.total_usd = 10;
  f.low_usd = 8;
  f.high_usd = 13;
  const auto spread = meter::forecast_spread_usd(f);
  ASSERT_TRUE(spread);
  EXPECT_EQ(*spread, std::make_pair(2.0, 3.0));
  EXPECT_EQ(meter::forecast_band_usd(10, *spread), std::make_pair(8.0, 13.0));
  f.high_usd = f.low_usd;
  EXPECT_FALSE(meter::forecast_spread_usd(f));
}

TEST(MoneyOwner, PriceListRulesInNanoDollars) {
  EXPECT_EQ(meter::priced_sum_nanos({{1'000'000'000, 8}, {10'000'000, 0.5}}), 8'005'000'000);
  EXPECT_TRUE(meter::moved_over_half(100, 151));
  EXPECT_FALSE(meter::moved_over_half(100, 150));
  EXPECT_TRUE(meter::moved_over_half(100, 49));
  EXPECT_EQ(meter::change_per_mille(1000, 1234), 234);
  EXPECT_EQ(meter::change_per_mille(1000, 766), -234);
}

TEST(MoneyOwner, NumbersReadExactly) {
  EXPECT_EQ(*util::usd_micros_of_number(0.1), 100'000);
  EXPECT_EQ(*util::usd_micros_of_number(12.5), 12'500'000);
  EXPECT_EQ(*util::usd_micros_of_number(40), 40'000'000);
  EXPECT_EQ(*util::usd_micros_of_number(1e-5), 10);  // written 1e-05: read through its decimals
  EXPECT_EQ(*util::usd_micros_of_number(0.29), 290'000);
  EXPECT_EQ(*util::usd_micros_of_number(1234567.891011), 1'234'567'891'011);
  EXPECT_FALSE(util::usd_micros_of_number(-1));
  EXPECT_FALSE(util::usd_micros_of_number(1e20));
}

TEST(MoneyOwner, NodeAndOwnerBudgetsParseExactly) {
  auto b = agent::parse_node_budget("0.10/day");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->limit_micros, 100'000);
  b = agent::parse_node_budget("$5000/month");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->limit_micros, 5'000'000'000);
  for (const char* bad : {"1e3/day", "0.0000001/day", "-5/day", "nan/day", "2000000000/day"}) {
    auto r = agent::parse_node_budget(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("--node-budget"), std::string::npos) << r.error().message;
  }
  auto o = agent::parse_owner_budget("user:alice=0.29/day");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->limit_micros, 290'000);
}

TEST(MoneyOwner, ControlDatagramBudgetIsExact) {
  auto c = guard::parse_session_control(R"({"control": {"budget_usd": 0.29}})");
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->budget_micros, 290'000);
  c = guard::parse_session_control(R"({"control": {"budget_usd": "12.50"}})");
  ASSERT_TRUE(c && *c) << (c && !*c ? (*c).error().message : "");
  EXPECT_EQ((*c)->budget_micros, 12'500'000);
  for (const char* bad : {R"({"control": {"budget_usd": "12,50"}})", R"({"control": {"budget_usd": -1}})",
                          R"({"control": {"budget_usd": "0"}})", R"({"control": {"budget_usd": true}})"}) {
    c = guard::parse_session_control(bad);
    ASSERT_TRUE(c) << bad;
    ASSERT_FALSE(*c) << bad;
    EXPECT_NE((*c).error().message.find("control.budget_usd"), std::string::npos) << (*c).error().message;
  }
}

}  // namespace
}  // namespace gm
