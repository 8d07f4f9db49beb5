// gpumeter prices [GPU[:N]] [--provider P] [--region R] [--spot] [--all-regions] [--json]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "meter/meter.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::cli {

namespace {

std::string alnum_lower(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
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
  return make_error(ErrorKind::not_found, fmt::format("unknown GPU '{}'{}", query,
                                                      close.empty() ? "" : " (did you mean: " + close + "?)"));
}

}  // namespace

int cmd_prices(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "update") return cmd_prices_update(argc - 1, argv + 1);
  CLI::App app{"GPU offers from the catalog, cheapest first, with source and date", "prices"};
  std::string gpu_query;
  std::string provider, region;
  bool spot = false, all_regions = false, json = false;
  std::optional<std::string> catalog_file, config_file;
  app.add_option("gpu", gpu_query, "GPU[:N], e.g. H100, H100:8, A100-80GB, L4");
  app.add_option("--provider", provider, "only this provider (aws, gcp, azure, lambda, ...)");
  app.add_option("--region", region, "only this region");
  app.add_flag("--spot", spot, "order by spot price");
  app.add_flag("--all-regions", all_regions, "one row per region (default: each instance at its cheapest region)");
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--catalog", catalog_file, "offers CSV merged over the built-in catalog");
  app.add_option("--config", config_file,
                 "config file with your [pricing] rates (default $XDG_CONFIG_HOME/gpumeter/config.toml)");
  app.footer(
      "Subcommand: gpumeter prices update [--provider P] [--region R]... [--endpoint URL] [--dry-run] "
      "[--accept-changes]");
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  auto catalog = load_catalog(catalog_file);
  if (!catalog) return fail("prices", catalog.error());
  auto rates = load_contract_rates(config_file);
  if (!rates) return fail("prices", rates.error());

  std::optional<std::set<std::string>> gpus;
  std::optional<double> count;
  if (!gpu_query.empty()) {
    std::string name = gpu_query;
    if (const auto colon = name.rfind(':'); colon != std::string::npos) {
      auto n = parse_number(name.substr(colon + 1));
      if (!n || *n <= 0)
        return fail("prices", make_error(ErrorKind::usage, fmt::format("'{}': the count after ':' must be a positive number", gpu_query)));
      count = *n;
      name = name.substr(0, colon);
    }
    auto sel = select_gpus(*catalog, name);
    if (!sel) return fail("prices", sel.error());
    gpus = *sel;
  }
  const std::string prov = to_lower(provider);
  std::set<std::string> providers;
  for (const auto& o : catalog->offers()) providers.insert(o.provider);
  if (!prov.empty() && !providers.count(prov))
    return fail("prices", make_error(ErrorKind::not_found, fmt::format("--provider {}: not in the catalog (known: {})", provider,
                                                                       fmt::join(providers, ", "))));

  auto key = [&](const Offer& o) -> double {
    auto p = o.usd_per_gpu_hour(spot);
    return p ? *p : 1e18;
  };
  std::vector<const Offer*> rows;
  for (const auto& o : catalog->offers()) {
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

  if (json) {
    nlohmann::json out = {{"offers", nlohmann::json::array()}};
    for (const Offer* o : rows) {
      out["offers"].push_back(
          {{"provider", o->provider},
           {"region", o->region},
           {"instance", o->instance},
           {"gpu", o->gpu},
           {"gpu_count", o->gpu_count == std::floor(o->gpu_count)
                             ? nlohmann::json(static_cast<long long>(o->gpu_count))
                             : nlohmann::json(o->gpu_count)},
           {"ondemand_usd_per_hour", json_or_null(o->ondemand_usd_per_hour)},
           {"spot_usd_per_hour", json_or_null(o->spot_usd_per_hour)},
           {"usd_per_gpu_hour", json_or_null(o->usd_per_gpu_hour(spot))},
           {"your_usd_per_gpu_hour", nlohmann::json(nullptr)},
           {"your_price_basis", nlohmann::json(nullptr)},
           {"source", o->source},
           {"date", o->date},
           {"fetched_at", o->fetched_at.empty() ? nlohmann::json(nullptr) : nlohmann::json(o->fetched_at)},
           {"flags", o->flags}});
      if (auto mine = your_price(*o, spot, *rates)) {
        out["offers"].back()["your_usd_per_gpu_hour"] = mine->usd_per_gpu_hour();
        out["offers"].back()["your_price_basis"] = mine->basis;
      }
    }
    std::puts(out.dump(2).c_str());
    return kExitOk;
  }
  if (rows.empty()) {
    std::puts("No offers match.");
    return kExitOk;
  }
  TextTable t;
  using A = TextTable::Align;
  const bool mine = !rates->empty();
  std::vector<std::string> titles = {
      "GPU",      "N",           "PROVIDER", "REGION",
      "INSTANCE", "ON-DEMAND/H", "SPOT/H",   spot ? "SPOT $/GPU-H" : "$/GPU-H"};
  std::vector<A> align = {A::left, A::left, A::left, A::left, A::left, A::right, A::right, A::right};
  align[1] = A::right;
  if (mine) {
    titles.push_back("YOUR $/GPU-H");
    align.push_back(A::right);
  }
  for (const char* c : {"DATE", "FLAGS"}) {
    titles.push_back(c);
    align.push_back(A::left);
  }
  t.header(titles, align);
  std::set<std::string> sources;
  for (const Offer* o : rows) {
    std::vector<std::string> cells = {o->gpu,
                                      fmt::format("{:g}", o->gpu_count),
                                      o->provider,
                                      o->region,
                                      o->instance,
                                      format_usd_or(o->ondemand_usd_per_hour),
                                      format_usd_or(o->spot_usd_per_hour),
                                      format_usd_or(o->usd_per_gpu_hour(spot))};
    if (mine) {
      const auto y = your_price(*o, spot, *rates);
      cells.push_back(y ? format_usd(y->usd_per_gpu_hour()) : "-");
    }
    cells.push_back(o->fetched_at.empty() ? o->date : o->date + " (fetched)");
    cells.push_back(o->flags.empty() ? "" : "! " + fmt::format("{}", fmt::join(o->flags, ",")));
    t.row(cells);
    sources.insert(o->source);
  }
  std::fputs(t.render().c_str(), stdout);
  std::printf("\n%zu offer%s, cheapest first by %s $/GPU-hour%s. Sources:\n", rows.size(), rows.size() == 1 ? "" : "s",
              spot ? "spot" : "on-demand", all_regions || !region.empty() ? "" : " (each instance at its cheapest region; --all-regions for all)");
  for (const auto& s : sources) std::printf("  %s\n", s.c_str());
  bool flagged = false;
  for (const Offer* o : rows) flagged = flagged || !o->flags.empty();
  if (flagged) std::puts("Rows marked ! failed a sanity check: see docs/catalog.md for each flag.");
  if (mine)
    std::printf(
        "YOUR $/GPU-H: your [pricing] rates from %s (discounts, committed rates); '-' where none applies.\n",
        rates->origin.c_str());
  return kExitOk;
}

}  // namespace gm::cli
