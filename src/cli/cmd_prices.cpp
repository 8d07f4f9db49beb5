// gpumeter prices [GPU[:N]] [--provider P] [--region R] [--spot] [--all-regions] [--json]
#include <cstdio>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "meter/meter.h"
#include "report/prices_render.h"

namespace gm::cli {

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
  app.add_flag("--all-regions", all_regions,
               "one row per region (default: each instance at its cheapest region)");
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--catalog", catalog_file, "offers CSV merged over the built-in catalog");
  app.add_option("--config", config_file,
                 "config file with your [pricing] rates (default $XDG_CONFIG_HOME/gpumeter/config.toml)");
  app.footer(
      "Subcommand: gpumeter prices update [--provider P] [--region R]... [--endpoint URL] [--dry-run] "
      "[--accept-changes]");
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  auto catalog = catalog::load_catalog(catalog_file);
  if (!catalog) return fail("prices", catalog.error());
  auto rates = meter::load_contract_rates(config_file);
  if (!rates) return fail("prices", rates.error());

  auto rows =
      catalog::select_offers(*catalog, catalog::OfferQuery{gpu_query, provider, region, spot, all_regions});
  if (!rows) return fail("prices", rows.error());
  const std::string out =
      json ? report::render_prices_json(*rows, spot, *rates)
           : report::render_prices_text(*rows, spot, *rates, all_regions || !region.empty());
  std::fputs(out.c_str(), stdout);
  return util::kExitOk;
}

}  // namespace gm::cli
