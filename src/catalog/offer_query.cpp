// `prices`' offer selection: a GPU family, model or offer GPU, a count, provider, region, spot; cheapest
// first.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "catalog/catalog.h"
#include "util/units.h"

namespace gm::catalog {

namespace {

std::string alnum_lower(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Which catalog GPU ids a user's GPU query selects: a family ("H100") selects all its variants.
Result<std::set<std::string>> select_gpus(const Catalog& catalog, const std::string& query) {
  std::set<std::string> ids;
  const std::string q = alnum_lower(query);
  for (const auto& g : catalog.gpus())
    if (alnum_lower(g.family) == q) ids.insert(g.id);
  if (!ids.empty()) return ids;
  if (const GpuSpec* g = catalog.find_gpu(query)) return std::set<std::string>{g->id};
  for (const auto& o : catalog.offers())
    if (!o.gpu.empty() && alnum_lower(o.gpu) == q) ids.insert(o.gpu);
  if (!ids.empty()) return ids;
  const std::string close = catalog.suggest_gpu(query);
  return make_error(
      ErrorKind::not_found,
      fmt::format("unknown GPU '{}'{}", query, close.empty() ? "" : " (did you mean: " + close + "?)"));
}

}  // namespace

Result<std::vector<const Offer*>> select_offers(const Catalog& catalog, const OfferQuery& query) {
  const std::string& gpu_query = query.gpu;
  const std::string& provider = query.provider;
  const std::string& region = query.region;
  const bool spot = query.spot, all_regions = query.all_regions;
  std::optional<std::set<std::string>> gpus;
  std::optional<double> count;
  if (!gpu_query.empty()) {
    std::string name = gpu_query;
    if (const auto colon = name.rfind(':'); colon != std::string::npos) {
      auto n = util::parse_number(name.substr(colon + 1));
      if (!n || *n <= 0)
        return make_error(ErrorKind::usage,
                          fmt::format("'{}': the count after ':' must be a positive number", gpu_query));
      count = *n;
      name = name.substr(0, colon);
    }
    auto sel = select_gpus(catalog, name);
    if (!sel) return sel.error();
    gpus = *sel;
  }
  const std::string prov = util::to_lower(provider);
  std::set<std::string> providers;
  for (const auto& o : catalog.offers()) providers.insert(o.provider);
  if (!prov.empty() && !providers.count(prov))
    return make_error(ErrorKind::not_found, fmt::format("--provider {}: not in the catalog (known: {})",
                                                        provider, fmt::join(providers, ", ")));

  auto key = [&](const Offer& o) -> double {
    auto p = o.usd_per_gpu_hour(spot);
    return p ? *p : 1e18;
  };
  std::vector<const Offer*> rows;
  for (const auto& o : catalog.offers()) {
    if (o.gpu.empty()) continue;  // host VM rows carry no GPU
    if (gpus && !gpus->count(o.gpu)) continue;
    if (count && std::fabs(o.gpu_count - *count) > 1e-9) continue;
    if (!prov.empty() && o.provider != prov) continue;
    if (!region.empty() && o.region != region) continue;
    if (spot && !o.spot_usd_per_hour) continue;
    rows.push_back(&o);
  }
  if (!all_regions && region.empty()) {
    std::map<std::pair<std::string, std::string>, const Offer*> best;
    for (const Offer* o : rows) {
      auto& b = best[{o->provider, o->instance}];
      if (!b || key(*o) < key(*b)) b = o;
    }
    rows.clear();
    for (auto& [k, o] : best) rows.push_back(o);
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const Offer* a, const Offer* b) {
    if (key(*a) != key(*b)) return key(*a) < key(*b);
    return std::tie(a->provider, a->instance, a->region) < std::tie(b->provider, b->instance, b->region);
  });

  return rows;
}

}  // namespace gm::catalog
