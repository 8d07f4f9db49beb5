// FOCUS 1.x CSV rows from the ledger's runs.
#include "report/focus.h"

#include <fmt/format.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "meter/meter.h"
#include "util/csv.h"
#include "util/time.h"

namespace gm::report {

namespace {

/// First day of the month (UTC) of `unix_ms`, and of the next month.
std::pair<std::int64_t, std::int64_t> billing_month(std::int64_t unix_ms) {
  return {util::month_start_unix_ms(unix_ms), util::month_start_unix_ms(unix_ms, 1)};
}

std::string gpu_hours_text(std::int64_t billed_s) {
  // Exact to the second: hours with 6 decimals is ≤ 1.8 ms off; the seconds are the source of truth.
  return fmt::format("{:.6f}", static_cast<double>(billed_s) / 3600.0);
}

}  // namespace

const std::vector<std::string>& focus_columns() {
  static const std::vector<std::string> cols = {
      "BilledCost",        "EffectiveCost",     "ListCost",
      "ContractedCost",    "BillingCurrency",   "BillingPeriodStart",
      "BillingPeriodEnd",  "ChargePeriodStart", "ChargePeriodEnd",
      "ChargeCategory",    "ChargeClass",       "ChargeFrequency",
      "ChargeDescription", "PricingCategory",   "PricingQuantity",
      "PricingUnit",       "ListUnitPrice",     "ConsumedQuantity",
      "ConsumedUnit",      "ResourceId",        "ResourceName",
      "ResourceType",      "ServiceCategory",   "ServiceName",
      "ProviderName",      "PublisherName",     "InvoiceIssuerName",
      "RegionId",          "RegionName",        "SkuId",
      "SubAccountId",      "SubAccountName",    "Tags"};
  return cols;
}

Result<std::string> render_focus_csv(const store::Ledger& ledger, const MultiOptions& options) {
  store::RunFilter filter;
  filter.since_unix_ms = options.since_unix_ms;
  filter.until_unix_ms = options.until_unix_ms;
  GM_TRY(std::vector<store::RunRecord> runs, ledger.runs(filter));
  std::string out;
  for (std::size_t i = 0; i < focus_columns().size(); ++i) out += (i ? "," : "") + focus_columns()[i];
  out += "\r\n";
  // Oldest first, as billing data usually is.
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    const store::RunRecord& r = *it;
    if (options.since_unix_ms && r.start_unix_ms < *options.since_unix_ms) continue;
    if (options.until_unix_ms && r.start_unix_ms >= *options.until_unix_ms) continue;
    const std::int64_t end_ms = r.end_unix_ms.value_or(r.start_unix_ms + r.wall_ms);
    const auto [period_start, period_end] = billing_month(r.start_unix_ms);
    // One row per allocated GPU (a run without GPU telemetry: one row for the host). The run's cost is
    // split in whole micro-dollars, the remainder to the first GPUs: the rows add up to the run exactly.
    std::vector<std::string> resources = r.gpus_allocated;
    if (resources.empty()) resources.push_back("");
    const std::vector<MicroUsd> costs = meter::split_equally(r.cost_micros, resources.size());
    std::string provider = r.provider.empty() ? "self-hosted" : r.provider;
    const bool spot = r.price_source.find("spot") != std::string::npos;
    const std::string tags = nlohmann::json(r.labels).dump();
    for (std::size_t g = 0; g < resources.size(); ++g) {
      const std::string cost_text = util::usd_decimal(costs[g], true);
      const std::string resource_id = resources[g].empty() ? r.host : r.host + "/" + resources[g];
      const std::string quantity = gpu_hours_text(r.billed_s);
      const std::vector<std::string> row = {
          cost_text,
          cost_text,
          cost_text,
          cost_text,
          "USD",
          util::iso8601_utc(period_start),
          util::iso8601_utc(period_end),
          util::iso8601_utc(r.start_unix_ms),
          util::iso8601_utc(std::max(end_ms, r.start_unix_ms + 1000)),
          "Usage",
          "",
          "Usage-Based",
          fmt::format("gpumeter run {}: {}", r.id, r.command),
          spot ? "Dynamic" : "Standard",
          quantity,
          "GPU-Hours",
          util::usd_decimal(r.price_micros_per_gpu_hour, true),
          quantity,
          "GPU-Hours",
          resource_id,
          fmt::format("run {} {}{}", r.id, r.gpu_model.empty() ? "GPU" : r.gpu_model,
                      resources[g].empty() ? "" : " " + resources[g]),
          "GPU",
          "Compute",
          "GPU compute (gpumeter)",
          provider,
          provider,
          provider,
          r.region,
          r.region,
          r.gpu_model,
          r.user,
          r.user,
          tags};
      for (std::size_t c = 0; c < row.size(); ++c) out += (c ? "," : "") + util::csv_escape(row[c]);
      out += "\r\n";
    }
  }
  return out;
}

}  // namespace gm::report
