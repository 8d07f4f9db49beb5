#include <gtest/gtest.h>

#include <random>

#include "meter/meter.h"
#include "support/support.h"

namespace gm {
namespace {

const catalog::Catalog& cat() {
  static const catalog::Catalog c = *catalog::Catalog::builtin();
  return c;
}

TEST(MeterTest, OneHourOnAnOfferBillsExactlyItsPrice) {
  meter::PricingOptions po;
  po.offer = "aws:p5.48xlarge";
  auto q = meter::resolve_price(po, cat(), std::nullopt, nullptr);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->origin, meter::PriceOrigin::flag_offer);
  EXPECT_EQ(q->micros_per_gpu_hour, 6'880'000);  // $55.04 / 8
  const auto billed = meter::billed_seconds(3'600'000, q->billing);
  EXPECT_EQ(billed, 3600);
  EXPECT_EQ(meter::billed_cost(*q, billed, 8), 55'040'000);
  // integrated per interval, one hour in 1 s steps on 8 GPUs: the same exact figure
  meter::CostIntegrator integ(q->micros_per_gpu_hour * 8);
  for (int i = 0; i < 3600; ++i) integ.add_ns(1'000'000'000);
  EXPECT_EQ(integ.total(), 55'040'000);
  EXPECT_NE(q->source.find("p5.48xlarge"), std::string::npos);
}

TEST(MeterTest, MoneyArithmeticInMicroDollars) {
  EXPECT_EQ(meter::scale_micros(10'000'000, 0.8), 8'000'000);          // an 80 % warning threshold of $10
  EXPECT_EQ(meter::scale_micros(3, 0.5), 2);                           // rounded to the nearest micro-dollar
  EXPECT_EQ(meter::micros_per_hour(1'000, 1'000'000'000), 3'600'000);  // $0.001 a second is $3.60 an hour
  EXPECT_EQ(meter::micros_per_hour(1'000, 0), 0);
  EXPECT_EQ(meter::budget_left_micros(10'000'000, 12'500'000), -2'500'000);
  EXPECT_EQ(meter::forecast_over_budget_micros(12.5, 10'000'000), 2'500'000);
  EXPECT_LE(meter::forecast_over_budget_micros(9.9999994, 10'000'000), 0);
  EXPECT_EQ(meter::micros_to_nanos(7), 7'000);
  EXPECT_EQ(*meter::nano_usd_per_month(1'000'000, 3'600'000), 730LL * 1'000'000'000);  // $1 an hour for 730 h
  EXPECT_FALSE(meter::nano_usd_per_month(1, 0).has_value());
  EXPECT_EQ(meter::nano_usd_per_month_at(1'000'000), 730LL * 1'000'000'000);
  EXPECT_EQ(*meter::nano_usd_per_1k(1'000'000, 2'000), 500'000'000);
  EXPECT_FALSE(meter::nano_usd_per_1k(1, 0).has_value());
  EXPECT_DOUBLE_EQ(*meter::usd_per_units(2'000'000, 1'000'000, 1e6), 2.0);
  EXPECT_FALSE(meter::usd_per_units(1, 0, 1e3).has_value());
  EXPECT_DOUBLE_EQ(meter::gpu_ns_cost_usd(3'600'000, 1e9), 0.001);  // one GPU-second at $3.60/h
}

TEST(MeterTest, MinimumAndGranularity) {
  catalog::BillingRule aws = cat().billing_rule("aws"), gcp = cat().billing_rule("gcp"),
                       azure = cat().billing_rule("azure");
  EXPECT_EQ(meter::billed_seconds(5'000, aws), 60);
  EXPECT_EQ(meter::billed_seconds(59'999, gcp), 60);
  EXPECT_EQ(meter::billed_seconds(60'001, aws), 61);
  EXPECT_EQ(meter::billed_seconds(61'000, azure), 120);
  EXPECT_EQ(meter::billed_seconds(120'000, azure), 120);
  EXPECT_EQ(meter::billed_seconds(1, azure), 60);
  catalog::BillingRule per_second;
  EXPECT_EQ(meter::billed_seconds(4'200, per_second), 5);
  meter::PriceQuote q;
  q.micros_per_gpu_hour = util::usd_to_micros(3600);  // $1 per GPU-second
  EXPECT_EQ(meter::billed_cost(q, 5, 1), 5'000'000);
  EXPECT_EQ(meter::billed_cost(q, 60, 2), 120'000'000);
}

TEST(MeterTest, CostIntegratorCarriesRemainders) {
  meter::CostIntegrator integ(1);  // one micro-dollar per hour: every interval rounds to zero on its own
  for (int i = 0; i < 3600; ++i) integ.add_ns(1'000'000'000);
  EXPECT_EQ(integ.total(), 1);
  std::mt19937_64 rng(7);
  meter::CostIntegrator a(util::usd_to_micros(2.71828));
  std::int64_t total_ns = 0;
  for (int i = 0; i < 10000; ++i) {
    const auto ns = static_cast<std::int64_t>(rng() % 3'000'000'000ULL);
    a.add_ns(ns);
    total_ns += ns;
  }
  EXPECT_EQ(a.total(), static_cast<MicroUsd>(static_cast<util::Int128>(util::usd_to_micros(2.71828)) *
                                             total_ns / 3'600'000'000'000LL));
}

TEST(MeterTest, PriceResolutionOrder) {
  test::TempDir dir;
  meter::PricingOptions po;
  po.config_path = dir.write("c.toml", "[pricing]\nprice_usd_per_gpu_hour = 1.5\n");
  auto q = meter::resolve_price(po, cat(), std::string("NVIDIA H100 80GB HBM3"), nullptr);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->origin, meter::PriceOrigin::config_file);
  EXPECT_EQ(q->micros_per_gpu_hour, 1'500'000);
  po.offer = "gcp:a3-highgpu-1g:spot";
  q = meter::resolve_price(po, cat(), std::nullopt, nullptr);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->origin, meter::PriceOrigin::flag_offer);
  EXPECT_TRUE(q->spot);
  EXPECT_EQ(q->billing.minimum_s, 60);
  po.price_usd_per_gpu_hour = 2.0;
  q = meter::resolve_price(po, cat(), std::nullopt, nullptr);
  EXPECT_EQ(q->origin, meter::PriceOrigin::flag_price);

  meter::PricingOptions none;
  none.config_path = dir.write("empty.toml", "");
  q = meter::resolve_price(none, cat(), std::string("NVIDIA H100 80GB HBM3"), nullptr);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->origin, meter::PriceOrigin::catalog_reference);
  EXPECT_EQ(q->micros_per_gpu_hour,
            util::usd_to_micros(cat().reference_price("H100 SXM 80GB")->usd_per_gpu_hour));
  EXPECT_NE(q->source.find("median"), std::string::npos);

  meter::PricingOptions bad;
  bad.offer = "aws:p9.mega";
  EXPECT_EQ(meter::resolve_price(bad, cat(), std::nullopt, nullptr).error().kind, ErrorKind::not_found);
  bad.offer = "nonsense";
  EXPECT_EQ(meter::resolve_price(bad, cat(), std::nullopt, nullptr).error().kind, ErrorKind::usage);
  meter::PricingOptions bad_toml;
  bad_toml.config_path = dir.write("bad.toml", "[pricing\nx=");
  auto e = meter::resolve_price(bad_toml, cat(), std::nullopt, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("bad.toml:1"), std::string::npos) << e.error().message;
}

TEST(MeterTest, DetectedInstanceFromDmi) {
  test::TempDir dir;
  dir.write("class/dmi/id/sys_vendor", "Amazon EC2\n");
  dir.write("class/dmi/id/product_name", "p4d.24xlarge\n");
  meter::DmiInstanceDetector det(dir.path());
  EXPECT_EQ(det.instance_type().value_or(""), "p4d.24xlarge");
  meter::PricingOptions po;
  po.config_path = dir.write("empty.toml", "");
  auto q = meter::resolve_price(po, cat(), std::string("NVIDIA A100-SXM4-40GB"), &det);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->origin, meter::PriceOrigin::detected_instance);
  EXPECT_EQ(q->provider, "aws");
  test::TempDir gcp;
  gcp.write("class/dmi/id/sys_vendor", "Google\n");
  gcp.write("class/dmi/id/product_name", "Google Compute Engine\n");
  EXPECT_FALSE(meter::DmiInstanceDetector(gcp.path()).instance_type().has_value());
}

TEST(MeterTest, PricingContextSeparatesUserMistakesFromUnpricedGpus) {
  test::TempDir dir;
  dir.write("class/dmi/id/sys_vendor", "Amazon EC2\n");
  dir.write("class/dmi/id/product_name", "p4d.24xlarge\n");
  meter::PricingOptions none;
  none.config_path = dir.write("empty.toml", "");
  auto ctx = meter::PricingContext::open(none, std::make_unique<meter::DmiInstanceDetector>(dir.path()));
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  auto a100 = ctx->price_for(std::string("NVIDIA A100-SXM4-40GB"));
  ASSERT_TRUE(a100.ok());
  ASSERT_TRUE(a100->quote.has_value());
  EXPECT_EQ(a100->quote->origin, meter::PriceOrigin::detected_instance);
  EXPECT_EQ(ctx->gpu_for("NVIDIA A100-SXM4-40GB", "nvidia")->id, "A100 SXM 40GB");

  // Without a detector and without a catalog price: data, not an error.
  auto bare = meter::PricingContext::open({}, nullptr);
  ASSERT_TRUE(bare.ok());
  auto unknown = bare->price_for(std::string("Some Future GPU"));
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->quote.has_value());
  EXPECT_FALSE(unknown->unpriced_reason.empty());

  // An explicit offer that does not resolve is the user's mistake.
  meter::PricingOptions bad;
  bad.offer = "nosuchcloud:nosuchinstance";
  auto wrong = meter::PricingContext::open(bad, nullptr);
  ASSERT_TRUE(wrong.ok());
  auto e = wrong->price_for(std::string("NVIDIA A100-SXM4-40GB"));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().kind, ErrorKind::usage);

  // A --catalog file that does not exist fails at open, naming the file.
  meter::PricingOptions missing;
  missing.catalog_override = dir.path() + "/nope.csv";
  auto m = meter::PricingContext::open(missing, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("nope.csv"), std::string::npos) << m.error().message;
}

TEST(MeterTest, AttributionInvariantHoldsOnRandomScenarios) {
  std::mt19937_64 rng(12345);
  for (int iter = 0; iter < 5000; ++iter) {
    gpu::DeviceSample s;
    if (rng() % 5) s.utilization_pct = static_cast<std::uint32_t>(rng() % 101);
    const int n = static_cast<int>(rng() % 7);
    for (int i = 0; i < n; ++i) {
      gpu::ProcessSample p;
      p.pid = static_cast<std::uint32_t>(100 + i);
      if (rng() % 3) p.memory_bytes = rng() % (80ULL << 30);
      if (rng() % 2) p.sm_util_pct = static_cast<std::uint32_t>(rng() % 101);
      s.processes.push_back(p);
    }
    const MicroUsd c = static_cast<MicroUsd>(rng() % 100'000'000);
    const meter::Attribution a = meter::attribute(c, 700.0, s);
    MicroUsd sum = a.unallocated;
    double energy = 0;
    for (const auto& sh : a.shares) {
      EXPECT_GE(sh.cost, 0);
      EXPECT_LE(sh.idle_cost, sh.cost);
      sum += sh.cost;
      energy += sh.energy_j;
    }
    ASSERT_EQ(sum, c) << "iteration " << iter;
    if (n == 0) EXPECT_EQ(a.unallocated, c);
    else EXPECT_NEAR(energy, 700.0, 1e-6);
  }
}

TEST(MeterTest, AttributionUsesSmShareElseMemory) {
  gpu::DeviceSample s;
  s.utilization_pct = 50;
  s.processes = {{1, 30ULL << 30, 75}, {2, 10ULL << 30, 25}};
  meter::Attribution a = meter::attribute(1'000'000, 0, s);
  EXPECT_TRUE(a.by_sm);
  EXPECT_EQ(a.shares[0].cost, 750'000);
  EXPECT_EQ(a.shares[1].cost, 250'000);
  EXPECT_EQ(a.shares[0].idle_cost, 375'000);
  s.processes = {{1, 30ULL << 30, std::nullopt}, {2, 10ULL << 30, 0}};
  a = meter::attribute(1'000'000, 0, s);
  EXPECT_FALSE(a.by_sm);
  EXPECT_EQ(a.shares[0].cost, 750'000);
}

TEST(MeterTest, EnergyCounterResetNeverNegativeOrDoubled) {
  meter::EnergyMeter m;
  gpu::DeviceSample s;
  s.power_mw = 300'000;
  auto feed = [&](std::int64_t t_s, std::uint64_t mj) {
    s.t_ns = t_s * 1'000'000'000;
    s.energy_mj = mj;
    return m.add(s);
  };
  EXPECT_EQ(feed(0, 1'000'000), 0);
  EXPECT_DOUBLE_EQ(feed(1, 1'300'000), 300.0);
  EXPECT_DOUBLE_EQ(feed(2, 5'000), 300.0);  // reset: falls back to the power samples for that interval
  EXPECT_DOUBLE_EQ(feed(3, 305'000), 300.0);
  EXPECT_DOUBLE_EQ(m.total_j(), 900.0);
  EXPECT_EQ(m.resets(), 1u);
  meter::EnergyMeter p;  // no counter: trapezoid of power
  gpu::DeviceSample a;
  a.t_ns = 0;
  a.power_mw = 100'000;
  p.add(a);
  a.t_ns = 2'000'000'000;
  a.power_mw = 300'000;
  EXPECT_DOUBLE_EQ(p.add(a), 400.0);
  EXPECT_EQ(p.method(), gpu::EnergyMethod::power_integration);
}

TEST(MeterTest, Carbon) {
  auto e = meter::estimate_carbon(10.0, cat(), "aws", "us-east-1");
  ASSERT_TRUE(e.has_value());
  EXPECT_NEAR(e->co2_kg, 10.0 * 1.15 * e->g_per_kwh / 1000.0, 1e-12);
  EXPECT_FALSE(e->intensity_source.empty());
  EXPECT_FALSE(meter::estimate_carbon(1.0, cat(), "", "").has_value());
  EXPECT_NEAR(meter::estimate_carbon(1.0, cat(), "", "", 500.0, 1.2)->co2_kg, 0.6, 1e-12);
}

}  // namespace
}  // namespace gm
