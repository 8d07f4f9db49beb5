// `gpumeter prices`: the selected offers as a table with sources and dates, or as JSON.
#include "report/prices_render.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;

std::string render_prices_json(const std::vector<const catalog::Offer*>& rows, bool spot,
                               const meter::ContractRates& rates) {
  nlohmann::json out = {{"offers", nlohmann::json::array()}};
  for (const catalog::Offer* o : rows) {
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
    if (auto mine = meter::your_price(*o, spot, rates)) {
      out["offers"].back()["your_usd_per_gpu_hour"] = mine->usd_per_gpu_hour();
      out["offers"].back()["your_price_basis"] = mine->basis;
    }
  }
  return out.dump(2) + "\n";
}

std::string render_prices_text(const std::vector<const catalog::Offer*>& rows, bool spot,
                               const meter::ContractRates& rates, bool every_region) {
  if (rows.empty()) return "No offers match.\n";
  util::TextTable t;
  using A = util::TextTable::Align;
  const bool mine = !rates.empty();
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
  auto money = [](const std::optional<double>& v) { return v ? util::format_usd(*v) : std::string("-"); };
  std::set<std::string> sources;
  for (const catalog::Offer* o : rows) {
    std::vector<std::string> cells = {o->gpu,
                                      fmt::format("{:g}", o->gpu_count),
                                      o->provider,
                                      o->region,
                                      o->instance,
                                      money(o->ondemand_usd_per_hour),
                                      money(o->spot_usd_per_hour),
                                      money(o->usd_per_gpu_hour(spot))};
    if (mine) {
      const auto y = meter::your_price(*o, spot, rates);
      cells.push_back(y ? util::format_usd(y->usd_per_gpu_hour()) : "-");
    }
    cells.push_back(o->fetched_at.empty() ? o->date : o->date + " (fetched)");
    cells.push_back(o->flags.empty() ? "" : "! " + fmt::format("{}", fmt::join(o->flags, ",")));
    t.row(cells);
    sources.insert(o->source);
  }
  std::string out = t.render();
  out += fmt::format("\n{} offer{}, cheapest first by {} $/GPU-hour{}. Sources:\n", rows.size(),
                     rows.size() == 1 ? "" : "s", spot ? "spot" : "on-demand",
                     every_region ? "" : " (each instance at its cheapest region; --all-regions for all)");
  for (const auto& s : sources) out += "  " + s + "\n";
  bool flagged = false;
  for (const catalog::Offer* o : rows) flagged = flagged || !o->flags.empty();
  if (flagged) out += "Rows marked ! failed a sanity check: see docs/catalog.md for each flag.\n";
  if (mine)
    out += "YOUR $/GPU-H: your [pricing] rates from " + rates.origin +
           " (discounts, committed rates); '-' where none applies.\n";
  return out;
}

}  // namespace gm::report
