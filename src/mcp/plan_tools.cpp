// plan_job and find_prices: `gpumeter plan --json` and `gpumeter prices --json` as tools.
#include <fmt/format.h>

#include "catalog/catalog.h"
#include "mcp/tools.h"
#include "meter/meter.h"
#include "plan/plan.h"
#include "report/plan_render.h"
#include "report/prices_render.h"
#include "util/json_in.h"
#include "util/units.h"

namespace gm::mcp {

namespace {

using nlohmann::json;

/// A number argument given as text ("2e9", "7B") or as a JSON number, as the flag's text.
std::optional<std::string> number_text(Args& a, std::string_view key) {
  const json* v = a.raw(key);
  if (!v) return std::nullopt;
  if (auto s = util::json_string(v)) return s;
  if (auto n = util::json_number(v)) return fmt::format("{}", *n);
  a.fail(key, std::string("expected a number or its text, got ") + std::string(util::json_type_name(v)));
  return std::nullopt;
}

std::optional<int> small_int(Args& a, std::string_view key, int max) {
  auto v = a.integer(key, 1, max);
  return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

}  // namespace

ToolResult plan_job(const nlohmann::json& args, const ServerOptions&) {
  Args a(args);
  plan::PlanSettings s;
  s.model = a.string("model", 4096);
  s.params = number_text(a, "params");
  if (auto task = a.string("task", 32)) s.task = *task;
  s.tokens = number_text(a, "tokens");
  const auto gpu = a.string("gpu", 128);
  s.gpus = small_int(a, "gpus", 100'000);
  s.seq = small_int(a, "seq", 10'000'000);
  s.batch = small_int(a, "batch", 1'000'000);
  s.precision = a.string("precision", 32);
  s.spot = a.boolean("spot").value_or(false);
  s.optimize = a.string("optimize", 32);
  const std::int64_t top = a.integer("top", 1, 50).value_or(10);
  if (auto e = a.finish()) return tool_error(*e);
  if (!s.model && !s.params) return tool_error("give model (a built-in name such as llama-3.2-1b) or params");
  auto req = plan::request_from_settings(s);
  if (!req) return tool_error(req.error().message);
  auto catalog = catalog::load_catalog(std::nullopt);
  if (!catalog) return tool_error(catalog.error().message);
  if (gpu) {
    const catalog::GpuSpec* g = catalog->find_gpu(*gpu);
    if (!g) {
      const std::string close = catalog->suggest_gpu(*gpu);
      return tool_error(
          fmt::format("unknown GPU '{}'{}", *gpu, close.empty() ? "" : " (did you mean: " + close + "?)"));
    }
    req->gpu = g->id;
  }
  auto result = plan::make_plan(*req, plan::offers_from_catalog(*catalog));
  if (!result) return tool_error(result.error().message);
  plan::add_default_assumptions(*result, plan::given_settings(s));
  auto parsed = util::json_parse(report::render_plan_json(*result, req->objective), "plan");
  if (!parsed || !parsed->is_object()) return tool_error("internal error: the plan's JSON did not read back");
  ToolResult r;
  r.structured = std::move(*parsed);
  // The best options only: a model reads tens of them, not the whole catalog.
  if (auto options = r.structured.find("options"); options != r.structured.end() && options->is_array()) {
    const std::size_t all = options->size();
    if (all > static_cast<std::size_t>(top)) options->erase(options->begin() + top, options->end());
    r.structured["options_total"] = all;
  }
  r.text = util::json_string(r.structured, "recommendation").value_or("no recommendation");
  return r;
}

ToolResult find_prices(const nlohmann::json& args, const ServerOptions&) {
  Args a(args);
  catalog::OfferQuery q;
  q.gpu = a.string("gpu", 128).value_or("");
  q.provider = a.string("provider", 64).value_or("");
  q.region = a.string("region", 64).value_or("");
  q.spot = a.boolean("spot").value_or(false);
  q.all_regions = a.boolean("all_regions").value_or(false);
  const std::int64_t limit = a.integer("limit", 1, 500).value_or(20);
  if (auto e = a.finish()) return tool_error(*e);
  auto catalog = catalog::load_catalog(std::nullopt);
  if (!catalog) return tool_error(catalog.error().message);
  auto rates = meter::load_contract_rates(std::nullopt);
  if (!rates) return tool_error(rates.error().message);
  auto rows = catalog::select_offers(*catalog, q);
  if (!rows) return tool_error(rows.error().message);
  const std::size_t total = rows->size();
  if (rows->size() > static_cast<std::size_t>(limit)) rows->resize(static_cast<std::size_t>(limit));
  auto parsed = util::json_parse(report::render_prices_json(*rows, q.spot, *rates), "prices");
  if (!parsed || !parsed->is_object())
    return tool_error("internal error: the offers' JSON did not read back");
  ToolResult r;
  r.structured = std::move(*parsed);
  r.structured["total"] = total;
  if (rows->empty()) {
    r.text = "no offer matches";
  } else {
    const catalog::Offer& best = *rows->front();
    const auto per_gpu = best.usd_per_gpu_hour(q.spot);
    r.text = fmt::format("{} offers; cheapest: {} {} {} ({} x {}) at {}/GPU-hour{}", total, best.provider,
                         best.region, best.instance, best.gpu_count, best.gpu,
                         per_gpu ? util::format_usd(*per_gpu) : "n/a", q.spot ? " (spot)" : "");
  }
  return r;
}

}  // namespace gm::mcp
