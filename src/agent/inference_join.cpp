// The cost join: tokens and requests an engine served, tied to the owner whose GPU cost the collector
// measures. Each interval, an owner's measured cost is charged to the models its engines served in that
// interval, split by generated tokens (equally when none were generated); cost from intervals whose scrape
// failed waits and is charged with the tokens of the next good scrape, so Σ model cost = the owner's cost
// since the first scrape.
#include <algorithm>
#include <array>
#include <set>

#include "agent/collector.h"
#include "sys/proc.h"

namespace gm::agent {

Collector::~Collector() = default;

void Collector::init_endpoints() {
  for (const auto& spec : options_.inference_endpoints) {
    auto e = std::make_unique<EndpointState>();
    e->spec = spec;
    e->view.endpoint = spec.display;
    endpoints_.push_back(std::move(e));
  }
  for (const auto& d : devices_) inference_priced_ = inference_priced_ && d.price.has_value();
}

void Collector::add_discovered_endpoints(const std::map<std::uint32_t, sys::Owner>& owner_of) {
  std::set<std::uint32_t> pids;
  for (const auto& [pid, o] : owner_of) pids.insert(pid);
  discovery_->offer(std::move(pids));
  for (auto& spec : discovery_->take_found()) {
    const bool known = std::any_of(endpoints_.begin(), endpoints_.end(),
                                   [&](const auto& e) { return e->spec.display == spec.display; });
    if (known) continue;
    auto e = std::make_unique<EndpointState>();
    e->spec = spec;
    e->view.endpoint = spec.display;
    endpoints_.push_back(std::move(e));
    scrapers_->add(std::move(spec));  // same order as endpoints_: outcomes are matched by index
  }
}

void Collector::link_endpoints(const std::map<std::uint32_t, sys::Owner>& owner_of,
                               const std::map<std::string, sys::Owner>& present, std::int64_t now_ns) {
  for (auto& e : endpoints_) {
    std::optional<sys::Owner> found;
    if (!e->spec.owner.empty()) {
      // By the owner label: an owner of a GPU process in this sample, or a pod holding a GPU.
      for (const auto& [pid, o] : owner_of)
        if (!found && o.name == e->spec.owner) found = o;
      for (const auto& [key, o] : present)
        if (!found && o.name == e->spec.owner) found = o;
    } else {
      // By the process listening on the endpoint's port: the GPU process that is it or one of its descendants
      // (vLLM's API server starts the engine process that holds the GPU).
      const bool alive =
          e->listener_pid &&
          ::access((options_.proc_root + "/" + std::to_string(*e->listener_pid)).c_str(), F_OK) == 0;
      if (!alive && (e->listener_checked_ns < 0 || now_ns - e->listener_checked_ns >= 10'000'000'000)) {
        e->listener_pid = serving::find_listening_pid(options_.proc_root, serving::endpoint_port(e->spec));
        e->listener_checked_ns = now_ns;
      }
      if (e->listener_pid) {
        if (auto it = owner_of.find(*e->listener_pid); it != owner_of.end())
          found = it->second;
        else {
          const sys::ProcReader proc(options_.proc_root);
          for (std::uint32_t pid : proc.descendants(*e->listener_pid))
            if (auto d = owner_of.find(pid); d != owner_of.end()) {
              found = d->second;
              break;
            }
        }
      }
    }
    if (found && (!e->owner || e->owner->key() != found->key())) {
      e->owner = std::move(found);
      e->fold = serving::ServedFold();  // a new owner starts from a fresh baseline
      if (e->resume_owner_key == e->owner->key()) {
        // The same owner as before the agent restarted: continue from the counters saved then.
        e->fold.resume(e->resume_start_time_s, e->resume_prev);
        if (!pending_cost_.count(e->owner->key())) {
          pending_cost_[e->owner->key()] = 0;
          last_booked_ns_[e->owner->key()] = now_ns;
        }
      }
      e->resume_owner_key.reset();
      e->resume_prev.clear();
    }
    e->view.linked = e->owner.has_value();
  }
}

void Collector::book_inference(std::vector<serving::ScrapeOutcome> outcomes,
                               const std::map<std::string, MicroUsd>& owner_cost, std::int64_t now_ns) {
  using Counts = std::array<double, 4>;  // prompt, generated, cached, requests
  struct Booking {
    std::map<std::string, Counts> models;
    std::map<std::string, std::array<bool, 4>> has;
    std::map<std::string, serving::InferenceEngine> engine;
  };
  std::map<std::string, Booking> by_owner;
  for (std::size_t i = 0; i < endpoints_.size() && i < outcomes.size(); ++i) {
    EndpointState& e = *endpoints_[i];
    serving::ScrapeOutcome& out = outcomes[i];
    if (!out.reading) {
      e.view.up = false;
      ++e.view.errors[out.error];
      e.view.last_error = out.error + ": " + out.detail;
      if (e.owner) by_owner[e.owner->key()];
      continue;
    }
    const serving::EngineReading& r = *out.reading;
    e.view.up = true;
    e.view.engine = r.engine;
    e.view.last_error.clear();
    if (!e.owner) continue;  // no owner on a GPU yet: nothing to charge, and no baseline either
    Booking& b = by_owner[e.owner->key()];
    const serving::ServedFold::Step step = e.fold.add(r);
    for (const auto& [model, delta] : step.models) {
      Counts& c = b.models[model];
      auto& has = b.has[model];
      b.engine[model] = r.engine;
      for (std::size_t f = 0; f < 4; ++f) {
        if (!delta.has[f]) continue;
        c[f] += delta.counts[f];
        has[f] = true;
      }
    }
    if (step.restarted) ++e.view.resets;  // one restart, however many counters showed it
  }
  // Owners with a linked endpoint accrue their measured cost; it is charged to models once tokens can be
  // counted.
  std::set<std::string> linked;
  for (const auto& e : endpoints_)
    if (e->owner) linked.insert(e->owner->key());
  for (const std::string& key : linked) {
    auto cost_it = owner_cost.find(key);
    const MicroUsd c = cost_it == owner_cost.end() ? 0 : cost_it->second;
    auto b = by_owner.find(key);
    const bool read_now = b != by_owner.end() && !b->second.models.empty();
    if (!pending_cost_.count(key)) {
      // Not started: the first good scrape is the baseline; cost is charged from the next interval on.
      if (read_now) {
        pending_cost_[key] = 0;
        last_booked_ns_[key] = now_ns;
      }
      continue;
    }
    pending_cost_[key] += c;
    if (!read_now) continue;  // every endpoint of the owner failed: the cost waits for the next good scrape
    Booking& bk = b->second;
    std::vector<std::string> names;
    std::vector<double> weights;
    for (const auto& [model, counts] : bk.models) {
      names.push_back(model);
      weights.push_back(counts[1]);
    }
    const std::vector<MicroUsd> shares = serving::split_cost(pending_cost_[key], weights);
    const std::int64_t since = last_booked_ns_.count(key) ? last_booked_ns_[key] : now_ns;
    const double seconds = static_cast<double>(now_ns - since) / 1e9;
    const sys::Owner* owner = nullptr;
    for (const auto& e : endpoints_)
      if (e->owner && e->owner->key() == key) owner = &*e->owner;
    for (std::size_t m = 0; m < names.size(); ++m) {
      const Counts& cnt = bk.models[names[m]];
      const auto& has = bk.has[names[m]];
      InferenceModelCounters& ic = inference_[{key, names[m]}];
      ic.owner = *owner;
      ic.model = names[m];
      ic.engine = bk.engine[names[m]];
      ic.prompt_tokens += cnt[0], ic.generated_tokens += cnt[1], ic.cached_tokens += cnt[2],
          ic.requests += cnt[3];
      ic.has_prompt = ic.has_prompt || has[0];
      ic.has_generated = ic.has_generated || has[1];
      ic.has_cached = ic.has_cached || has[2];
      ic.has_requests = ic.has_requests || has[3];
      ic.cost += shares[m];
      ic.window.push_back({now_ns, seconds, shares[m], cnt[0], cnt[1], cnt[3]});
      const std::int64_t keep_after = now_ns - options_.inference_window_ms * 1'000'000;
      std::erase_if(ic.window, [&](const InferenceModelCounters::Slice& s) { return s.t_ns <= keep_after; });
    }
    pending_cost_[key] = 0;
    last_booked_ns_[key] = now_ns;
  }
  last_collect_ns_ = now_ns;
}

void Collector::fill_inference(Snapshot& snap) const {
  snap.inference.clear();
  for (const auto& [k, ic] : inference_) snap.inference.push_back(ic);
  snap.endpoints.clear();
  for (const auto& e : endpoints_) snap.endpoints.push_back(e->view);
  snap.inference_priced = inference_priced_;
  snap.now_ns = last_collect_ns_;
  snap.inference_window_ms = options_.inference_window_ms;
}

}  // namespace gm::agent
