// Serving engines' own metrics: endpoint specs, reading vLLM / SGLang / TGI / Triton counters from a parsed
// exposition, counter resets, bounded scrapes on background threads, and the cost split across models.
#include <toml++/toml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "meter/meter.h"
#include "serving/serving.h"
#include "util/config.h"
#include "util/enum_text.h"

namespace gm::serving {

constexpr util::EnumText<InferenceEngine> kEngines[] = {{InferenceEngine::vllm, "vllm"},
                                                        {InferenceEngine::sglang, "sglang"},
                                                        {InferenceEngine::tgi, "tgi"},
                                                        {InferenceEngine::triton, "triton"}};

const char* to_string(InferenceEngine engine) {
  return util::enum_text(kEngines, engine, "unknown");
}

// ---- endpoint specs ------------------------------------------------------------------------------

Result<InferenceEndpointSpec> parse_inference_endpoint(std::string_view text, std::string_view flag) {
  const std::string where = std::string(flag) + " '" + std::string(text) + "'";
  InferenceEndpointSpec spec;
  std::string_view rest = text;
  const std::size_t comma = rest.find(',');
  std::string_view url = rest.substr(0, comma);
  rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  while (!rest.empty()) {
    const std::size_t c = rest.find(',');
    const std::string_view opt = rest.substr(0, c);
    rest = c == std::string_view::npos ? std::string_view() : rest.substr(c + 1);
    const std::size_t eq = opt.find('=');
    if (eq == std::string_view::npos || eq + 1 == opt.size())
      return make_error(ErrorKind::usage,
                        where + ": expected KEY=VALUE after the URL, got '" + std::string(opt) + "'");
    const std::string_view key = opt.substr(0, eq), value = opt.substr(eq + 1);
    if (key == "owner")
      spec.owner = value;
    else if (key == "model")
      spec.model = value;
    else
      return make_error(ErrorKind::usage,
                        where + ": unknown option '" + std::string(key) + "' (owner=, model=)");
  }
  spec.url = url;
  std::string_view u = url;
  std::string scheme;
  if (u.substr(0, 7) == "http://")
    scheme = "http://", u.remove_prefix(7);
  else if (u.substr(0, 8) == "https://")
    scheme = "https://", u.remove_prefix(8);
  else
    return make_error(ErrorKind::usage, where + ": expected an http:// or https:// URL");
  const std::size_t slash = u.find('/');
  std::string_view authority = u.substr(0, slash);
  if (slash != std::string_view::npos) spec.path = u.substr(slash);
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos)
    authority.remove_prefix(at + 1);
  if (authority.empty()) return make_error(ErrorKind::usage, where + ": no host in the URL");
  spec.scheme_host_port = scheme + std::string(authority);
  const std::string_view path_only = std::string_view(spec.path).substr(0, spec.path.find('?'));
  spec.display = spec.scheme_host_port + std::string(path_only);
  return spec;
}

Result<std::vector<InferenceEndpointSpec>> load_inference_endpoints(const std::string& config_path) {
  GM_TRY(toml::table tbl, util::parse_config_file(config_path));
  std::vector<InferenceEndpointSpec> out;
  const toml::node_view<toml::node> node = tbl["agent"]["inference_endpoints"];
  if (!node) return out;
  const toml::array* list = node.as_array();
  if (!list)
    return make_error(ErrorKind::usage,
                      config_path + ": agent.inference_endpoints must be an array of strings");
  for (const toml::node& item : *list) {
    const auto text = item.value<std::string>();
    if (!text)
      return make_error(ErrorKind::usage,
                        config_path + ": agent.inference_endpoints must be an array of strings");
    auto spec = parse_inference_endpoint(*text, config_path + ": agent.inference_endpoints");
    if (!spec) return spec.error();
    out.push_back(std::move(*spec));
  }
  return out;
}

// ---- engines -------------------------------------------------------------------------------------

namespace {

enum class Field { prompt, generated, cached, requests };

struct Source {
  std::string_view metric;
  Field field;
};

struct EngineTable {
  InferenceEngine engine;
  std::string_view model_label;  // "" = the engine labels no model
  std::vector<Source> sources;   // for a field, the first metric present wins
};

// Names and labels from the engines' own sources (see docs/inference.md for versions).
const std::vector<EngineTable>& engine_tables() {
  static const std::vector<EngineTable> t = {
      {InferenceEngine::vllm,
       "model_name",
       {{"vllm:prompt_tokens_total", Field::prompt},
        {"vllm:generation_tokens_total", Field::generated},
        {"vllm:request_success_total", Field::requests},
        {"vllm:prefix_cache_hits_total", Field::cached},
        {"vllm:gpu_prefix_cache_hits_total", Field::cached}}},
      {InferenceEngine::sglang,
       "model_name",
       {{"sglang:prompt_tokens_total", Field::prompt},
        {"sglang:generation_tokens_total", Field::generated},
        {"sglang:num_requests_total", Field::requests},
        {"sglang:cached_tokens_total", Field::cached}}},
      {InferenceEngine::tgi,
       "",
       {{"tgi_request_input_length_sum", Field::prompt},
        {"tgi_request_generated_tokens_sum", Field::generated},
        {"tgi_request_success", Field::requests},
        {"tgi_request_success_total", Field::requests}}},
      {InferenceEngine::triton,
       "model",
       {{"nv_llm_input_token_len_sum", Field::prompt},
        {"nv_llm_output_token_len_sum", Field::generated},
        {"nv_inference_count", Field::requests}}},
  };
  return t;
}

std::optional<double>& slot(ModelTotals& m, Field f) {
  switch (f) {
    case Field::prompt:
      return m.prompt_tokens;
    case Field::generated:
      return m.generated_tokens;
    case Field::cached:
      return m.cached_tokens;
    case Field::requests:
      break;
  }
  return m.requests;
}

}  // namespace

Result<EngineReading> read_engine(const Exposition& e, const std::string& default_model) {
  // Index samples by name once.
  std::map<std::string_view, std::vector<const ExpositionSample*>> by_name;
  for (const auto& s : e.samples) by_name[s.name].push_back(&s);
  for (const EngineTable& t : engine_tables()) {
    bool any = false;
    for (const Source& src : t.sources) any = any || by_name.count(src.metric);
    if (!any) continue;
    EngineReading r;
    r.engine = t.engine;
    std::map<Field, bool> done;
    for (const Source& src : t.sources) {
      auto it = by_name.find(src.metric);
      if (it == by_name.end() || done[src.field]) continue;
      done[src.field] = true;
      for (const ExpositionSample* s : it->second) {
        const std::string* m = t.model_label.empty() ? nullptr : s->label(t.model_label);
        const std::string model = m && !m->empty() ? *m : default_model;
        // A counter is never negative or NaN; such a sample says nothing.
        if (!std::isfinite(s->value) || s->value < 0) continue;
        std::optional<double>& v = slot(r.models[model], src.field);
        v = v.value_or(0) + s->value;
      }
    }
    // Gauges: vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc (a fraction despite the name) and
    // drops deprecated names two releases later: the new name wins, the old one is read where it is alone.
    if (t.engine == InferenceEngine::vllm)
      for (std::string_view name : {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}) {
        auto it = by_name.find(name);
        if (it == by_name.end()) continue;
        for (const ExpositionSample* s : it->second) {
          if (!std::isfinite(s->value) || s->value < 0 || s->value > 1) continue;
          const std::string* m = s->label(t.model_label);
          std::optional<double>& v = r.models[m && !m->empty() ? *m : default_model].kv_cache_usage_ratio;
          v = std::max(v.value_or(0), s->value);
        }
        break;
      }
    if (auto it = by_name.find("process_start_time_seconds"); it != by_name.end() && !it->second.empty())
      r.start_time_s = it->second.front()->value;
    return r;
  }
  return make_error("no vLLM, SGLang, TGI or Triton token/request counters in the exposition");
}

// ---- counters and the cost split ---------------------------------------------------------------------

double CounterDelta::add(double value, bool restarted) {
  if (!prev_) {
    prev_ = value;
    return 0;
  }
  double d = value - *prev_;
  if (restarted || d < 0) {
    ++resets_;
    d = value;  // the engine started again from zero
  }
  prev_ = value;
  return d;
}

std::vector<MicroUsd> split_cost(MicroUsd cost, const std::vector<double>& weights) {
  // Token counts as integer weights (a count over 1e15 is capped: it says nothing more).
  std::vector<std::uint64_t> w(weights.size(), 0);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double x = weights[i];
    w[i] = std::isfinite(x) && x > 0 ? static_cast<std::uint64_t>(std::llround(std::min(x, 1e15))) : 0;
  }
  return meter::split_micros(cost, w);
}

// ---- scraping ----------------------------------------------------------------------------------------

ScrapeOutcome scrape_endpoint(const InferenceEndpointSpec& spec, std::int64_t timeout_ms,
                              util::HttpClient& http) {
  constexpr std::size_t kMaxBody = 16u << 20;
  ScrapeOutcome out;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  util::HttpRequest request;
  request.scheme_host_port = spec.scheme_host_port;
  request.path = spec.path;
  request.headers = {{"Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1"}};
  request.connect_timeout = request.read_timeout = request.write_timeout =
      std::chrono::milliseconds(timeout_ms);
  std::string body;
  bool too_large = false, too_slow = false;
  request.sink = [&](std::string_view piece) {
    if (body.size() + piece.size() > kMaxBody) return !(too_large = true);
    if (std::chrono::steady_clock::now() > deadline) return !(too_slow = true);
    body.append(piece);
    return true;
  };
  const auto res = http.send(request);
  if (!res) {
    const util::HttpFailure err = res.failure();
    if (too_large)
      out.error = "too_large", out.detail = "body over 16 MiB";
    else if (too_slow || err == util::HttpFailure::read || err == util::HttpFailure::connection_timeout)
      out.error = "timeout", out.detail = "no complete answer within " + std::to_string(timeout_ms) + " ms";
    else
      out.error = "connect", out.detail = util::http_failure_name(err);
    return out;
  }
  if (res->status != 200) {
    out.error = "http";
    out.detail = "HTTP status " + std::to_string(res->status);
    return out;
  }
  auto parsed = parse_exposition(body);
  if (!parsed) {
    out.error = "parse";
    out.detail = parsed.error().message;
    return out;
  }
  auto reading = read_engine(*parsed, spec.model);
  if (!reading) {
    out.error = "no_engine_metrics";
    out.detail = reading.error().message;
    return out;
  }
  out.reading = std::move(*reading);
  return out;
}

struct InferenceScrapers::Worker {
  std::thread thread;
  std::uint64_t done_round = 0;  // the round `result` answers
  bool busy = false;
  ScrapeOutcome result;
};

InferenceScrapers::InferenceScrapers(std::vector<InferenceEndpointSpec> specs, std::int64_t timeout_ms,
                                     util::HttpClient& http)
    : specs_(std::move(specs)), timeout_ms_(timeout_ms), http_(http) {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    workers_.push_back(std::make_unique<Worker>());
    start_worker(workers_.back().get(), specs_[i]);
  }
}

void InferenceScrapers::add(InferenceEndpointSpec spec) {
  std::lock_guard lock(mu_);
  specs_.push_back(spec);
  workers_.push_back(std::make_unique<Worker>());
  workers_.back()->done_round = round_;  // scraped from the next round on
  start_worker(workers_.back().get(), std::move(spec));
}

void InferenceScrapers::start_worker(Worker* w, InferenceEndpointSpec spec) {
  {
    w->thread = std::thread([this, w, spec = std::move(spec)] {
      std::unique_lock lock(mu_);
      while (true) {
        cv_.wait(lock, [&] { return stop_ || round_ > w->done_round; });
        if (stop_) return;
        const std::uint64_t round = round_;
        w->busy = true;
        lock.unlock();
        ScrapeOutcome r = scrape_endpoint(spec, timeout_ms_, http_);
        lock.lock();
        w->busy = false;
        w->result = std::move(r);
        w->done_round = round;
        cv_.notify_all();
      }
    });
  }
}

InferenceScrapers::~InferenceScrapers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w->thread.join();
}

void InferenceScrapers::start_round() {
  {
    std::lock_guard lock(mu_);
    ++round_;
  }
  cv_.notify_all();
}

std::vector<ScrapeOutcome> InferenceScrapers::finish_round(std::int64_t deadline_ns) {
  const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns));
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] {
    return std::all_of(workers_.begin(), workers_.end(),
                       [&](const auto& w) { return w->done_round == round_; });
  });
  std::vector<ScrapeOutcome> out;
  for (auto& w : workers_) {
    if (w->done_round == round_) {
      out.push_back(std::move(w->result));
      w->result = ScrapeOutcome{};
    } else {
      ScrapeOutcome late;
      late.error = "deadline";
      late.detail = "scrape still running when the collection interval needed it";
      out.push_back(std::move(late));
    }
  }
  return out;
}

}  // namespace gm::serving
