// Price resolution (DESIGN §3 order) and billing.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <cstdlib>
#include <filesystem>

#include "meter/meter.h"
#include "util/config.h"
#include "util/file.h"
#include "util/units.h"

namespace gm::meter {

namespace {

std::string trimmed_file(const std::string& path) {
  auto s = util::read_small_file(path);
  if (!s) return {};
  return std::string(util::trim(*s));
}

PriceQuote quote_from_offer(const catalog::Offer& o, bool spot, PriceOrigin origin,
                            const catalog::Catalog& catalog, const std::string& how,
                            const ContractRates& rates) {
  PriceQuote q;
  q.micros_per_gpu_hour = util::usd_to_micros(*o.usd_per_gpu_hour(spot));
  const auto mine = your_price(o, spot, rates);
  if (mine) q.micros_per_gpu_hour = mine->micros_per_gpu_hour;
  q.origin = origin;
  q.provider = o.provider;
  q.region = o.region;
  q.spot = spot;
  q.billing = catalog.billing_rule(o.provider);
  q.source =
      fmt::format("{} {}:{} ({}, {}, {} GPU{} at {}/h; {}, {})", how, o.provider, o.instance, o.region,
                  spot ? "spot" : "on-demand", o.gpu_count, o.gpu_count == 1 ? "" : "s",
                  util::format_usd(spot ? *o.spot_usd_per_hour : *o.ondemand_usd_per_hour), o.source, o.date);
  if (mine)
    q.source +=
        fmt::format("; your price {}/GPU-h: {}, list {}/GPU-h", util::format_usd(mine->usd_per_gpu_hour()),
                    mine->basis, util::format_usd(*o.usd_per_gpu_hour(spot)));
  return q;
}

// "provider:instance[@region][:spot|:ondemand]"
Result<PriceQuote> quote_for_offer_text(const std::string& text, const catalog::Catalog& catalog,
                                        PriceOrigin origin, const std::string& how,
                                        const ContractRates& rates) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto colon = text.find(':', start);
    parts.push_back(text.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty() || parts[1].empty())
    return make_error(
        ErrorKind::usage,
        fmt::format("{} '{}': expected provider:instance[:spot], e.g. aws:p5.48xlarge", how, text));
  bool spot = false;
  if (parts.size() == 3) {
    if (parts[2] == "spot")
      spot = true;
    else if (parts[2] != "ondemand" && parts[2] != "on-demand")
      return make_error(ErrorKind::usage,
                        fmt::format("{} '{}': the third part must be 'spot' or 'ondemand'", how, text));
  }
  std::optional<std::string_view> region;
  std::string instance = parts[1];
  if (const auto at = instance.find('@'); at != std::string::npos) {
    region = std::string_view(parts[1]).substr(at + 1);
    instance = parts[1].substr(0, at);
  }
  const catalog::Offer* o = catalog.find_offer(parts[0], instance, region);
  if (!o) {
    std::vector<std::string> names;
    for (const auto& x : catalog.offers())
      if (std::find(names.begin(), names.end(), x.provider + ":" + x.instance) == names.end())
        names.push_back(x.provider + ":" + x.instance);
    const std::string close = util::suggest_names(parts[0] + ":" + instance, names, 4);
    return make_error(ErrorKind::not_found,
                      fmt::format("{} '{}': no such offer in the catalog{}", how, text,
                                  close.empty() ? "" : " (did you mean " + close + "?)"));
  }
  if (!o->usd_per_gpu_hour(spot))
    return make_error(ErrorKind::not_found, fmt::format("{} '{}': the catalog has no {} price for it", how,
                                                        text, spot ? "spot" : "on-demand"));
  return quote_from_offer(*o, spot, origin, catalog, how, rates);
}

}  // namespace

std::optional<std::string> default_config_path() {
  auto p = util::user_config_file();
  std::error_code ec;
  if (p && std::filesystem::exists(*p, ec)) return p;
  return std::nullopt;
}

std::optional<std::string> DmiInstanceDetector::instance_type() const {
  const std::string dir = sys_root_ + "/class/dmi/id/";
  const std::string vendor = trimmed_file(dir + "sys_vendor");
  const std::string product = trimmed_file(dir + "product_name");
  // EC2 puts the instance type in product_name ("p5.48xlarge"); GCP and Azure only say "Google Compute
  // Engine" / "Virtual Machine" there (their metadata servers would be needed), so they are not detected.
  if (vendor.find("Amazon EC2") != std::string::npos && !product.empty() &&
      product.find('.') != std::string::npos)
    return product;
  return std::nullopt;
}

Result<PriceQuote> resolve_price(const PricingOptions& options, const catalog::Catalog& catalog,
                                 const std::optional<std::string>& nvml_gpu_name,
                                 const InstanceDetector* detector) {
  if (options.price_usd_per_gpu_hour) {
    if (!(*options.price_usd_per_gpu_hour > 0) ||
        *options.price_usd_per_gpu_hour > catalog::kMaxUsdPerGpuHour)
      return make_error(ErrorKind::usage,
                        fmt::format("--price must be a positive number of USD per GPU-hour (at most {})",
                                    catalog::kMaxUsdPerGpuHour));
    PriceQuote q;
    // Exact, as every dollar text: the number's shortest decimal text (what was typed) through the one
    // parser.
    GM_TRY(q.micros_per_gpu_hour, util::usd_micros_of_number(*options.price_usd_per_gpu_hour));
    q.origin = PriceOrigin::flag_price;
    q.source = fmt::format("--price {}/GPU-h", util::format_usd(*options.price_usd_per_gpu_hour));
    q.billing = catalog.billing_rule("");
    return q;
  }
  std::optional<std::string> config = options.config_path;
  if (config) {
    std::error_code ec;
    if (!std::filesystem::exists(*config, ec))
      return make_error(ErrorKind::usage, fmt::format("--config {}: no such file", *config));
  } else {
    config = default_config_path();
  }
  GM_TRY(const ContractRates rates, load_contract_rates(config));
  if (options.offer)
    return quote_for_offer_text(*options.offer, catalog, PriceOrigin::flag_offer, "--offer", rates);

  if (config) {
    GM_TRY(const toml::table tbl, util::parse_config_file(*config));
    const auto* pricing = tbl["pricing"].as_table();
    if (pricing) {
      if (auto p = (*pricing)["price_usd_per_gpu_hour"].value<double>()) {
        if (!(*p > 0) || *p > catalog::kMaxUsdPerGpuHour)
          return make_error(ErrorKind::usage,
                            fmt::format("{}: pricing.price_usd_per_gpu_hour must be positive (at most {})",
                                        *config, catalog::kMaxUsdPerGpuHour));
        PriceQuote q;
        GM_TRY(q.micros_per_gpu_hour, util::usd_micros_of_number(*p));
        q.origin = PriceOrigin::config_file;
        q.source = fmt::format("config {}: {}/GPU-h", *config, util::format_usd(*p));
        q.provider = (*pricing)["provider"].value_or(std::string());
        q.region = (*pricing)["region"].value_or(std::string());
        q.billing = catalog.billing_rule(q.provider);
        return q;
      }
      if (auto o = (*pricing)["offer"].value<std::string>())
        return quote_for_offer_text(*o, catalog, PriceOrigin::config_file, "config " + *config + ": offer",
                                    rates);
    }
  }

  if (detector) {
    if (auto type = detector->instance_type()) {
      if (const catalog::Offer* o = catalog.find_offer_by_instance(*type); o && o->usd_per_gpu_hour())
        return quote_from_offer(*o, false, PriceOrigin::detected_instance, catalog, "detected instance",
                                rates);
    }
  }

  if (rates.onprem_usd_per_gpu_hour) {
    PriceQuote q;
    GM_TRY(q.micros_per_gpu_hour, util::usd_micros_of_number(*rates.onprem_usd_per_gpu_hour));
    q.origin = PriceOrigin::config_file;
    q.source = fmt::format("config {}: on-premises rate {}/GPU-h", rates.origin,
                           util::format_usd(*rates.onprem_usd_per_gpu_hour));
    q.billing = catalog.billing_rule("");
    return q;
  }

  if (nvml_gpu_name) {
    const catalog::GpuSpec* g = catalog.gpu_for_device_name(*nvml_gpu_name);
    if (!g) g = catalog.find_gpu(*nvml_gpu_name);
    if (g) {
      if (auto ref = catalog.reference_price(g->id)) {
        PriceQuote q;
        q.micros_per_gpu_hour = util::usd_to_micros(ref->usd_per_gpu_hour);
        q.origin = PriceOrigin::catalog_reference;
        q.source = fmt::format("catalog reference: median on-demand $/GPU-h of {} {} offers ({})",
                               ref->offers, g->id, util::format_usd(ref->usd_per_gpu_hour));
        q.billing = catalog.billing_rule("");
        return q;
      }
      return make_error(
          ErrorKind::not_found,
          fmt::format("no catalog price for {}: give --price USD_PER_GPU_HOUR or --offer", g->id));
    }
    return make_error(ErrorKind::not_found,
                      fmt::format("GPU '{}' is not in the catalog: give --price USD_PER_GPU_HOUR or --offer",
                                  *nvml_gpu_name));
  }
  return make_error(ErrorKind::not_found,
                    "no price: give --price USD_PER_GPU_HOUR or --offer provider:instance");
}

std::int64_t billed_seconds(std::int64_t wall_ms, const catalog::BillingRule& rule) {
  const std::int64_t g = std::max<std::int64_t>(1, rule.granularity_s);
  const std::int64_t unit_ms = g * 1000;
  const std::int64_t units = wall_ms <= 0 ? 0 : (wall_ms + unit_ms - 1) / unit_ms;
  return std::max(units * g, rule.minimum_s);
}

MicroUsd billed_cost(const PriceQuote& price, std::int64_t billed_s, unsigned gpus) {
  const util::Int128 p = static_cast<util::Int128>(price.micros_per_gpu_hour) * billed_s * gpus;
  return static_cast<MicroUsd>(p / 3600);
}

}  // namespace gm::meter
