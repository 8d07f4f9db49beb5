// gpumeter prices update: the per-offer report of the sanity rules, as text or JSON.
#include "report/price_update_render.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;

namespace {

std::string change(const std::optional<double>& before, const std::optional<double>& after) {
  if (!before || (after && *before == *after)) return util::format_usd_or(after);
  return util::format_usd_or(before) + " -> " + util::format_usd_or(after);
}

}  // namespace

std::string render_price_update(const prices::UpdateResult& result, const std::string& catalog_path,
                                bool written, bool json) {
  std::size_t counts[6] = {};
  for (const auto& o : result.offers) ++counts[static_cast<int>(o.verdict)];
  if (json) {
    nlohmann::json out = {{"fetched_at", result.fetched_at},
                          {"catalog", catalog_path},
                          {"written", written},
                          {"offers_in_catalog", result.fetched_catalog.size()},
                          {"providers", nlohmann::json::array()},
                          {"offers", nlohmann::json::array()},
                          {"unknown_instances", result.unknown_instances}};
    for (const auto& p : result.providers)
      out["providers"].push_back(
          {{"provider", prices::to_string(p.provider)},
           {"skipped", p.skipped.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.skipped)},
           {"requests", p.requests},
           {"rows_read", p.rows_read},
           {"rows_filtered", p.rows_filtered}});
    for (const auto& o : result.offers)
      out["offers"].push_back({{"provider", o.provider},
                               {"region", o.region},
                               {"instance", o.instance},
                               {"verdict", prices::to_string(o.verdict)},
                               {"detail", o.detail},
                               {"old_ondemand_usd_per_hour", json_or_null(o.old_ondemand_usd_per_hour)},
                               {"new_ondemand_usd_per_hour", json_or_null(o.new_ondemand_usd_per_hour)},
                               {"old_spot_usd_per_hour", json_or_null(o.old_spot_usd_per_hour)},
                               {"new_spot_usd_per_hour", json_or_null(o.new_spot_usd_per_hour)}});
    return out.dump(2) + "\n";
  }
  std::string s = fmt::format("Prices fetched at {}\n", result.fetched_at);
  for (const auto& p : result.providers) {
    if (!p.skipped.empty()) {
      s += fmt::format("  {:<7} skipped: {}\n", prices::to_string(p.provider), p.skipped);
      continue;
    }
    s += fmt::format(
        "  {:<7} {} request{}, {} price rows read, {} set aside (other OS, tenancy, term, tier or unit)\n",
        prices::to_string(p.provider), p.requests.size(), p.requests.size() == 1 ? "" : "s", p.rows_read,
        p.rows_filtered);
  }
  if (!result.offers.empty()) {
    util::TextTable t;
    using A = util::TextTable::Align;
    t.header({"PROVIDER", "REGION", "INSTANCE", "RESULT", "ON-DEMAND/H", "SPOT/H", "WHY"},
             {A::left, A::left, A::left, A::left, A::right, A::right, A::left});
    for (const auto& o : result.offers)
      t.row({o.provider, o.region, o.instance, prices::to_string(o.verdict),
             change(o.old_ondemand_usd_per_hour, o.new_ondemand_usd_per_hour),
             change(o.old_spot_usd_per_hour, o.new_spot_usd_per_hour), o.detail});
    s += "\n" + t.render();
  }
  s += fmt::format("\n{} added, {} updated, {} unchanged, {} flagged, {} held back, {} refused.\n", counts[0],
                   counts[1], counts[2], counts[3], counts[4], counts[5]);
  if (counts[4] > 0)
    s += "Held-back prices moved more than 50 % since the previous fetch; check them, then rerun with "
         "--accept-changes.\n";
  if (!result.unknown_instances.empty()) {
    s += fmt::format(
        "\n{} GPU instance type{} not in the instance family table (not priced; GPU model and count are "
        "never guessed):\n",
        result.unknown_instances.size(), result.unknown_instances.size() == 1 ? "" : "s");
    for (const auto& u : result.unknown_instances) s += "  " + u + "\n";
  }
  s += written ? fmt::format("\nWrote {} offers to {}\n", result.fetched_catalog.size(), catalog_path)
               : fmt::format("\nDry run: {} unchanged ({} offers would be written)\n", catalog_path,
                             result.fetched_catalog.size());
  return s;
}

}  // namespace gm::report
