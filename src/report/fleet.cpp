// Fleet report: PromQL increase() over the agents' counters through the Prometheus HTTP API.
#include "report/fleet.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "util/json_in.h"

namespace gm::report {

namespace {

using nlohmann::json;

struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

/// The samples of one instant-query answer; an error for anything but a vector of finite numbers.
Result<std::vector<Sample>> parse_answer(const PrometheusAnswer& answer, const std::string& url,
                                         const std::string& promql) {
  const std::string where = "--prometheus " + url;
  const auto parsed = util::json_parse(answer.body, where);
  if (!parsed || !parsed->is_object())
    return make_error(ErrorKind::unavailable, where + ": HTTP " + std::to_string(answer.http_status) +
                                                  ", not a Prometheus API answer");
  const json& j = *parsed;
  if (util::json_string(j, "status") != "success")
    return make_error(ErrorKind::unavailable, where + ": query '" + promql +
                                                  "' failed: " + util::json_string(j, "error").value_or("?"));
  auto unexpected = [&](const std::string& what) {
    return make_error(ErrorKind::unavailable, where + ": unexpected answer: " + what);
  };
  const json* data = util::json_object(j, "data");
  if (!data) return unexpected(util::JsonPath("data").wrong_type("an object", util::json_member(j, "data")));
  if (util::json_string(*data, "resultType") != "vector") return unexpected("resultType is not \"vector\"");
  const json* result = util::json_array(*data, "result");
  if (!result)
    return unexpected(
        util::JsonPath("data.result").wrong_type("an array", util::json_member(*data, "result")));
  std::vector<Sample> out;
  for (std::size_t i = 0; i < result->size(); ++i) {
    const json& r = (*result)[i];
    const util::JsonPath at = util::JsonPath("data.result") / i;
    Sample s;
    const json* metric = util::json_object(r, "metric");
    if (!metric) return unexpected((at / "metric").wrong_type("an object", util::json_member(r, "metric")));
    for (const auto& [k, v] : metric->items()) {
      auto label = util::json_string(&v);
      if (!label) return unexpected((at / "metric" / k).wrong_type("a string", &v));
      s.labels[k] = std::move(*label);
    }
    const json* pair = util::json_array(r, "value");
    const json* value = pair ? util::json_element(*pair, 1) : nullptr;
    const auto text = util::json_string(value);
    if (!text) return unexpected((at / "value" / std::size_t{1}).wrong_type("a string", value));
    const char* end = text->data() + text->size();
    const auto [p, ec] = std::from_chars(text->data(), end, s.value);
    if (ec != std::errc() || p != end || !std::isfinite(s.value))
      return unexpected("value '" + text->substr(0, 40) + "' is not a finite number");
    out.push_back(std::move(s));
  }
  return out;
}

double sum(const std::vector<Sample>& v) {
  double t = 0;
  for (const auto& s : v) t += s.value;
  return t;
}

}  // namespace

Result<FleetReport> query_fleet_report(const std::string& url, std::int64_t range_ms, const std::string& by,
                                       util::HttpClient& http) {
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
    return make_error(ErrorKind::usage,
                      "--prometheus '" + url + "': expected http://HOST:PORT or https://HOST:PORT");
  const PrometheusQuery query = [&](const std::string& promql) -> Result<PrometheusAnswer> {
    util::HttpRequest request;
    request.scheme_host_port = url;
    request.path = "/api/v1/query";
    request.params = {{"query", promql}};
    request.connect_timeout = std::chrono::seconds(5);
    request.read_timeout = std::chrono::seconds(60);
    const auto res = http.send(request);
    if (!res)
      return make_error(ErrorKind::unavailable,
                        "--prometheus " + url + ": " + util::http_failure_text(res.failure()));
    return PrometheusAnswer{res->status, res->body};
  };
  return fleet_report_from(query, url, range_ms, by);
}

Result<FleetReport> fleet_report_from(const PrometheusQuery& query, const std::string& url,
                                      std::int64_t range_ms, const std::string& by) {
  std::string group;
  if (by == "namespace")
    group = "namespace";
  else if (by == "job")
    group = "slurm_job";
  else if (by == "user")
    group = "user";
  else if (by == "account" || by == "slurm-account")
    group = "account";
  else if (by == "gpu")
    group = "instance, gpu, model";
  else
    return make_error(ErrorKind::usage, "--by '" + by + "': expected namespace, job, account, user or gpu");
  if (range_ms < 1000) return make_error(ErrorKind::usage, "--since: the range must be at least 1s");
  const std::string range = "[" + std::to_string(range_ms / 1000) + "s]";
  auto inc = [&](const char* metric) { return "increase(" + std::string(metric) + range + ")"; };
  auto instant_query = [&](const std::string& promql) -> Result<std::vector<Sample>> {
    GM_TRY(auto answer, query(promql));
    return parse_answer(answer, url, promql);
  };

  FleetReport rep;
  rep.by = by;
  rep.range_ms = range_ms;
  GM_TRY(auto device, instant_query("sum(" + inc("gpumeter_gpu_cost_usd_total") + ")"));
  GM_TRY(auto owners, instant_query("sum(" + inc("gpumeter_owner_cost_usd_total") + ")"));
  GM_TRY(auto unalloc, instant_query("sum(" + inc("gpumeter_gpu_unallocated_cost_usd_total") + ")"));
  GM_TRY(auto idle, instant_query("sum(" + inc("gpumeter_gpu_idle_cost_usd_total") + ")"));
  rep.device_cost_usd = sum(device);
  rep.owner_cost_usd = sum(owners);
  rep.unallocated_cost_usd = sum(unalloc);
  rep.idle_cost_usd = sum(idle);

  const bool per_gpu = by == "gpu";
  const char* cost_metric = per_gpu ? "gpumeter_gpu_cost_usd_total" : "gpumeter_owner_cost_usd_total";
  const char* energy_metric =
      per_gpu ? "gpumeter_gpu_energy_joules_total" : "gpumeter_owner_energy_joules_total";
  auto grouped = [&](const char* metric) { return "sum by (" + group + ") (" + inc(metric) + ")"; };
  GM_TRY(auto costs, instant_query(grouped(cost_metric)));
  GM_TRY(auto energy, instant_query(grouped(energy_metric)));
  std::vector<Sample> seconds;
  if (!per_gpu) {
    GM_TRY(auto s, instant_query(grouped("gpumeter_owner_gpu_seconds_total")));
    seconds = std::move(s);
  }
  auto key_of = [&](const Sample& s) {
    if (!per_gpu) {
      auto it = s.labels.find(group);
      return it == s.labels.end() ? std::string() : it->second;
    }
    auto get = [&](const char* k) {
      auto it = s.labels.find(k);
      return it == s.labels.end() ? std::string() : it->second;
    };
    return get("instance") + " gpu " + get("gpu") + " " + get("model");
  };
  std::map<std::string, FleetRow> rows;
  for (const auto& s : costs) {
    FleetRow& r = rows[key_of(s)];
    r.key = key_of(s);
    r.cost_usd += s.value;
  }
  for (const auto& s : energy) {
    FleetRow& r = rows[key_of(s)];
    r.key = key_of(s);
    r.energy_j = r.energy_j.value_or(0) + s.value;
  }
  for (const auto& s : seconds) {
    FleetRow& r = rows[key_of(s)];
    r.key = key_of(s);
    r.gpu_seconds = r.gpu_seconds.value_or(0) + s.value;
  }
  for (auto& [k, r] : rows) rep.rows.push_back(r);
  std::sort(rep.rows.begin(), rep.rows.end(), [](const FleetRow& a, const FleetRow& b) {
    return a.cost_usd != b.cost_usd ? a.cost_usd > b.cost_usd : a.key < b.key;
  });
  // GPUs held idle by processes (asked last: agents older than the series answer an empty vector).
  GM_TRY(auto held, instant_query("sum(" + inc("gpumeter_gpu_idle_held_cost_usd_total") + ")"));
  if (!held.empty()) rep.idle_held_cost_usd = sum(held);
  return rep;
}

}  // namespace gm::report
