// gpumeter prices update [--provider P]... [--region R]... [--endpoint URL] [--dry-run] [--accept-changes]
// [--json]
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "prices/prices.h"
#include "report/price_update_render.h"
#include "util/clock.h"

namespace gm::cli {

int cmd_prices_update(int argc, char** argv) {
  CLI::App app{
      "Fetch current on-demand and spot prices from the providers' public price lists into your catalog",
      "prices update"};
  std::vector<std::string> provider_names, regions;
  std::optional<std::string> endpoint;
  bool dry_run = false, accept = false, json = false;
  app.add_option("--provider", provider_names,
                 "aws, azure, gcp or lambda (repeatable; default: all, GCP and Lambda with a key)")
      ->delimiter(',');
  app.add_option("--region", regions,
                 "only this region (repeatable; default: the catalog's regions of each provider)")
      ->delimiter(',');
  app.add_option(
      "--endpoint", endpoint,
      "base URL replacing the providers' own (a mirror or a stand-in), e.g. http://127.0.0.1:8080");
  app.add_flag("--dry-run", dry_run, "fetch and check, write nothing");
  app.add_flag("--accept-changes", accept, "use prices that moved more than 50 % since the previous fetch");
  app.add_flag("--json", json, "machine-readable report");
  app.footer(
      "Keys: $GPUMETER_GCP_API_KEY (Cloud Billing Catalog API), $LAMBDA_API_KEY (Lambda Cloud API).\n"
      "Writes $GPUMETER_DATA_DIR/offers.csv, else $XDG_DATA_HOME/gpumeter/offers.csv (/var/lib/gpumeter for "
      "root).");
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  prices::UpdateOptions options;
  for (const auto& n : provider_names) {
    auto p = prices::provider_from(n);
    if (!p)
      return fail(
          "prices update",
          make_error(
              ErrorKind::usage,
              fmt::format("--provider {}: no price fetcher for it (known: aws, azure, gcp, lambda)", n)));
    if (std::find(options.providers.begin(), options.providers.end(), *p) == options.providers.end())
      options.providers.push_back(*p);
  }
  options.regions = regions;
  if (endpoint && endpoint->rfind("http://", 0) != 0 && endpoint->rfind("https://", 0) != 0)
    return fail(
        "prices update",
        make_error(ErrorKind::usage,
                   fmt::format("--endpoint '{}': expected http://HOST[:PORT] or https://...", *endpoint)));
  options.endpoint = endpoint;
  options.accept_changes = accept;
  if (const char* k = std::getenv("GPUMETER_GCP_API_KEY")) options.gcp_api_key = k;
  if (const char* k = std::getenv("LAMBDA_API_KEY")) options.lambda_api_key = k;
  options.now_unix_ms = util::system_clock().unix_ms();

  auto current = catalog::load_catalog(std::nullopt);
  if (!current) return fail("prices update", current.error());
  const std::string path = catalog::user_catalog_path();
  std::vector<catalog::Offer> previous;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
    auto rows = catalog::read_offers_file(path);
    if (!rows) return fail("prices update", rows.error());
    previous = std::move(*rows);
  }
  auto http = prices::make_http_getter();
  auto result = prices::fetch_update(options, *http, *current, previous);
  if (!result) {
    auto e = result.error();
    e.message += fmt::format("; {} left as it was", path);
    return fail("prices update", e);
  }
  if (!dry_run) {
    if (auto w = prices::write_file_atomically(path, catalog::offers_to_csv(result->fetched_catalog)); !w)
      return fail("prices update", w.error());
  }
  std::fputs(report::render_price_update(*result, path, !dry_run, json).c_str(), stdout);
  return util::kExitOk;
}

}  // namespace gm::cli
