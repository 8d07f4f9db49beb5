// Your own rates: [pricing] discounts, committed-use / reserved rates and an on-premises $/GPU-hour.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <filesystem>

#include "meter/meter.h"
#include "util/config.h"
#include "util/units.h"

namespace gm::meter {

namespace {

Result<std::int64_t> discount_of(const toml::node& node, const std::string& where) {
  std::optional<double> percent;
  if (auto s = node.value<std::string>()) {
    if (s->empty() || s->back() != '%')
      return make_error(ErrorKind::usage,
                        fmt::format("{}: '{}': write the discount as a percentage, e.g. \"30%\"", where, *s));
    auto p = util::parse_percent(*s);
    if (!p) return make_error(ErrorKind::usage, fmt::format("{}: {}", where, p.error().message));
    percent = *p;
  } else {
    return make_error(ErrorKind::usage,
                      fmt::format("{}: write the discount as a percentage string, e.g. \"30%\"", where));
  }
  if (!(*percent >= 0) || *percent >= 100)
    return make_error(ErrorKind::usage,
                      fmt::format("{}: a discount must be at least 0% and under 100%", where));
  return static_cast<std::int64_t>(std::llround(*percent * 10'000));
}

Result<double> rate_of(const toml::node& node, const std::string& where) {
  const auto v = node.value<double>();
  if (!v || !(*v > 0) || !std::isfinite(*v) || *v > catalog::kMaxUsdPerGpuHour * 64)
    return make_error(ErrorKind::usage, fmt::format("{}: must be a positive number of USD per hour", where));
  return *v;
}

std::string pct(std::int64_t ppm) {
  return ppm % 10'000 == 0 ? fmt::format("{}%", ppm / 10'000)
                           : fmt::format("{:g}%", static_cast<double>(ppm) / 10'000);
}

}  // namespace

Result<ContractRates> load_contract_rates(const std::optional<std::string>& config_path) {
  ContractRates rates;
  std::optional<std::string> path = config_path ? config_path : default_config_path();
  if (!path) return rates;
  std::error_code ec;
  if (!std::filesystem::exists(*path, ec))
    return make_error(ErrorKind::usage, fmt::format("--config {}: no such file", *path));
  GM_TRY(const toml::table tbl, util::parse_config_file(*path));
  rates.origin = *path;
  const auto* pricing = tbl["pricing"].as_table();
  if (!pricing) return rates;
  for (const auto& [key_node, value] : *pricing) {
    const std::string key(key_node.str());
    const std::string where = fmt::format("{}: pricing.{}", *path, key);
    if (key == "discount") {
      GM_TRY(rates.discount_ppm["*"], discount_of(value, where));
    } else if (key == "onprem_usd_per_gpu_hour") {
      const auto v = value.value<double>();
      if (!v || !(*v > 0) || *v > catalog::kMaxUsdPerGpuHour)
        return make_error(ErrorKind::usage,
                          fmt::format("{}: must be a positive number of USD per GPU-hour (at most {})", where,
                                      catalog::kMaxUsdPerGpuHour));
      rates.onprem_usd_per_gpu_hour = *v;
    } else if (const auto* provider = value.as_table()) {
      const std::string p = util::to_lower(key);
      for (const auto& [k2, v2] : *provider) {
        const std::string sub(k2.str());
        const std::string where2 = fmt::format("{}.{}", where, sub);
        if (sub == "discount") {
          GM_TRY(rates.discount_ppm[p], discount_of(v2, where2));
        } else if (sub == "committed" || sub == "reserved") {
          const auto* table = v2.as_table();
          if (!table)
            return make_error(
                ErrorKind::usage,
                fmt::format(
                    "{}: expected a table of instance = USD per hour, e.g. {{ \"p5.48xlarge\" = 30.5 }}",
                    where2));
          for (const auto& [inst, rate] : *table) {
            GM_TRY(auto r, rate_of(rate, fmt::format("{}.\"{}\"", where2, inst.str())));
            rates.committed_usd_per_hour[p + ":" + std::string(inst.str())] = r;
          }
        } else {
          return make_error(ErrorKind::usage,
                            fmt::format("{}: unknown key (known: discount, committed, reserved)", where2));
        }
      }
    }
  }
  return rates;
}

std::optional<YourPrice> your_price(const catalog::Offer& offer, bool spot, const ContractRates& rates) {
  if (offer.gpu_count <= 0) return std::nullopt;
  const auto count_milli = std::llround(offer.gpu_count * 1000);
  if (count_milli <= 0) return std::nullopt;
  if (!spot) {
    if (auto it = rates.committed_usd_per_hour.find(offer.provider + ":" + offer.instance);
        it != rates.committed_usd_per_hour.end()) {
      const util::Int128 per_instance = util::usd_to_micros(it->second);
      YourPrice y;
      y.micros_per_gpu_hour = static_cast<MicroUsd>(per_instance * 1000 / count_milli);
      y.basis = fmt::format("committed rate {}/h ({})", util::format_usd(it->second), rates.origin);
      return y;
    }
  }
  auto d = rates.discount_ppm.find(offer.provider);
  const bool own = d != rates.discount_ppm.end();
  if (!own) d = rates.discount_ppm.find("*");
  if (d == rates.discount_ppm.end()) return std::nullopt;
  const auto list = offer.usd_per_gpu_hour(spot);
  if (!list) return std::nullopt;
  const util::Int128 list_micros = util::usd_to_micros(*list);
  YourPrice y;
  y.micros_per_gpu_hour =
      static_cast<MicroUsd>((list_micros * (1'000'000 - d->second) + 500'000) / 1'000'000);
  y.basis = fmt::format("{} {}discount ({})", pct(d->second), own ? offer.provider + " " : "", rates.origin);
  return y;
}

}  // namespace gm::meter
