// The collector loop: sample, price, attribute, accumulate.
#include "agent/collector.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

namespace gm::agent {

sys::Owner other_owner() {
  sys::Owner o;
  o.kind = sys::OwnerKind::other;
  o.name = "other";
  return o;
}

namespace {
const std::string& other_key() {
  static const std::string k = other_owner().key();
  return k;
}
}  // namespace

Collector::Collector(gpu::GpuBackend& backend, sys::OwnerResolver& owners, util::Clock& clock,
                     std::vector<std::optional<meter::PriceQuote>> prices, AgentOptions options,
                     kubelet::PodResourcesCache* pod_resources)
    : backend_(backend),
      resolver_(owners),
      clock_(clock),
      options_(std::move(options)),
      pod_resources_(pod_resources) {
  const auto& infos = backend_.devices();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    DeviceView d;
    d.info = infos[i];
    d.caps = backend_.capabilities(static_cast<unsigned>(i));
    if (i < prices.size()) d.price = prices[i];
    d.energy_known = d.caps.power || d.caps.energy_counter;
    if (d.price && d.info.mig_enabled.value_or(false)) {
      for (const auto& m : d.info.mig_instances) {
        MigCounters mc;
        mc.instance = m;
        const auto price =
            meter::mig_micros_per_hour(d.price->micros_per_gpu_hour, m, d.info.memory_total_bytes);
        if (!price) continue;  // no slice size known: the instance is not priced (the board still is)
        mc.micros_per_hour = *price;
        mc.integrator = meter::CostIntegrator(mc.micros_per_hour);
        d.mig.push_back(mc);
      }
    }
    integrators_.emplace_back(d.price ? d.price->micros_per_gpu_hour : 0);
    energy_.emplace_back();
    devices_.push_back(std::move(d));
  }
  self_.started_unix_ms = clock_.unix_ms();
  if (pod_resources_) self_.pod_resources_up = false;
  if (!options_.inference_endpoints.empty() || options_.inference_discover) {
    // A scrape may take at most half an interval, so a slow engine never stalls the collection.
    scrape_timeout_ms_ =
        std::max<std::int64_t>(10, std::min(options_.inference_timeout_ms, options_.interval_ms / 2));
    scrapers_ =
        std::make_unique<serving::InferenceScrapers>(options_.inference_endpoints, scrape_timeout_ms_);
    init_endpoints();
  }
  if (options_.inference_discover) {
    serving::DiscoveryOptions d;
    d.proc_root = options_.proc_root;
    d.kubelet_pods_url = options_.kubelet_pods_url;
    d.kubelet_token_file = options_.kubelet_token_file;
    d.kubelet_every_ms = options_.kubelet_pods_every_ms;
    d.timeout_ms = scrape_timeout_ms_;
    d.note = options_.discovery_note;
    discovery_ = std::make_unique<serving::EndpointDiscovery>(d);
  }
}

sys::Owner Collector::holder_owner(const PodContainerRef& ref) const {
  // The owner its processes had, so that held-idle and busy intervals land on the same series.
  if (auto it = pod_owner_seen_.find(ref); it != pod_owner_seen_.end()) return it->second.first;
  sys::Owner o;
  o.kind = sys::OwnerKind::pod;
  o.pod_namespace = ref.pod_namespace;
  o.pod = ref.pod;
  o.container = ref.container;
  o.name = ref.pod_namespace + "/" + ref.pod;
  return o;
}

std::string Collector::owner_slot(const sys::Owner& owner, std::int64_t now_ns) {
  std::string key = owner.key();
  if (owners_.count(key)) {
    owner_seen_ns_[key] = now_ns;
    return key;
  }
  if (owners_.size() >= options_.max_owners) {
    // Free the slot of the owner absent longest, if it has been absent long enough. Its series end and
    // its totals move into "other" on each GPU, so Σ owners + unallocated = device cost holds at every
    // instant (DESIGN §3), not only over ranges.
    std::string victim;
    std::int64_t oldest = now_ns - options_.owner_expiry_ms * 1'000'000;
    for (const auto& [k, seen] : owner_seen_ns_)
      if (seen <= oldest) {
        oldest = seen;
        victim = k;
      }
    if (victim.empty()) return other_key();
    owners_.erase(victim);
    owner_seen_ns_.erase(victim);
    move_counters(victim, other_key());
  }
  owners_[key] = owner;
  owner_seen_ns_[key] = now_ns;
  return key;
}

void Collector::move_counters(const std::string& from_key, const std::string& to_key) {
  for (auto& d : devices_) {
    auto it = d.owners.find(from_key);
    if (it == d.owners.end()) continue;
    OwnerCounters& o = d.owners[to_key];
    o.cost += it->second.cost;
    o.idle_cost += it->second.idle_cost;
    o.energy_j += it->second.energy_j;
    o.gpu_seconds += it->second.gpu_seconds;
    d.owners.erase(it);
  }
}

void Collector::fold_finished_slurm_jobs(std::int64_t now_ns) {
  if (options_.slurm_job_expiry_ms <= 0) return;
  const std::int64_t cutoff = now_ns - options_.slurm_job_expiry_ms * 1'000'000;
  std::vector<std::string> finished;
  for (const auto& [key, owner] : owners_)
    if (owner.kind == sys::OwnerKind::slurm_job && owner_seen_ns_[key] <= cutoff) finished.push_back(key);
  for (const std::string& key : finished) {
    const sys::Owner job = owners_[key];
    owners_.erase(key);
    owner_seen_ns_.erase(key);
    // One series per user and account instead of one per job; the moved totals keep every device's
    // Σ owners + unallocated equal to its cost.
    sys::Owner total;
    total.kind = sys::OwnerKind::slurm_finished;
    total.user = job.user;
    total.slurm_account = job.slurm_account;
    total.name = job.slurm_account.empty() ? job.user : job.slurm_account + "/" + job.user;
    const std::string to = owner_slot(total, now_ns);
    move_counters(key, to);
  }
}

void Collector::collect_once() {
  const std::int64_t t0 = clock_.monotonic_ns();
  const auto wall0 = std::chrono::steady_clock::now();
  if (scrapers_) scrapers_->start_round();  // engines are scraped while the GPUs are sampled
  // Sample outside the lock: a hung driver call must not block scrapes.
  std::vector<gpu::DeviceSample> samples;
  std::vector<std::int64_t> times;
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    samples.push_back(backend_.sample(static_cast<unsigned>(i)));
    times.push_back(clock_.monotonic_ns());
    samples.back().t_ns = times.back();
  }
  // Owners of every process, also resolved outside the lock.
  std::map<std::uint32_t, sys::Owner> owner_of;
  for (const auto& s : samples)
    for (const auto& p : s.processes)
      if (!owner_of.count(p.pid)) owner_of[p.pid] = resolver_.resolve(p.pid);
  resolver_.end_interval();
  // Kubelet device assignments, also outside the lock: the ask is bounded by a deadline and made only every
  // few seconds (cached in between), so a slow kubelet delays a collection, never a scrape.
  bool held = false;
  if (pod_resources_) {
    pod_resources_->refresh();
    if (holders_.size() != devices_.size() || pod_resources_->generation() != holders_generation_) {
      holders_ = device_holders(backend_.devices(), pod_resources_->assignments());
      holders_generation_ = pod_resources_->generation();
    }
    held = std::any_of(holders_.begin(), holders_.end(), [](const DeviceHolders& h) { return !h.empty(); });
  }
  if (held) {
    std::vector<std::vector<std::uint32_t>> pids_by_device(samples.size());
    for (std::size_t i = 0; i < samples.size(); ++i)
      for (const auto& p : samples[i].processes) pids_by_device[i].push_back(p.pid);
    name_pods_from_holders(owner_of, pids_by_device, holders_);
    for (const auto& [pid, o] : owner_of)
      if (o.kind == sys::OwnerKind::pod && !o.pod_namespace.empty())
        pod_owner_seen_[PodContainerRef{o.pod_namespace, o.pod, o.container}] = {o, t0};
    std::erase_if(pod_owner_seen_,
                  [&](const auto& e) { return t0 - e.second.second > options_.owner_expiry_ms * 1'000'000; });
  }

  std::vector<serving::ScrapeOutcome> outcomes;
  if (scrapers_) {
    const auto deadline = wall0 + std::chrono::milliseconds(scrape_timeout_ms_);
    outcomes = scrapers_->finish_round(
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count());
  }
  std::map<std::string, MicroUsd>
      owner_cost;  // this interval's cost of every owner present (by Owner::key())
  std::map<std::string, sys::Owner> present;

  const std::int64_t unix_now = clock_.unix_ms();
  std::lock_guard lock(mu_);
  fold_finished_slurm_jobs(t0);
  if (pod_resources_) {
    self_.pod_resources_up = pod_resources_->up();
    self_.pod_resources_errors = pod_resources_->errors();
  }
  if (discovery_ && !options_.kubelet_pods_url.empty())
    self_.kubelet_pods_errors = discovery_->kubelet_errors();
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    DeviceView& d = devices_[i];
    gpu::DeviceSample& s = samples[i];
    const double joules = energy_[i].add(s);
    if (d.last) {
      const std::int64_t dt_ns = times[i] - d.last->t_ns;
      if (dt_ns > 0) {
        const MicroUsd c = d.price ? integrators_[i].add_ns(dt_ns) : 0;
        const double dt_s = static_cast<double>(dt_ns) / 1e9;
        const meter::Attribution a = meter::attribute(c, joules, s);
        d.cost += c;
        d.seconds += dt_s;
        const IdleState idle_state = classify_idle(s);
        if (idle_state == IdleState::idle_held) d.idle_held_cost += c;
        idle_history_.add(i, idle_state, unix_now, dt_ns / 1'000'000, c);
        if (d.energy_known) d.energy_j += joules;
        for (auto& [k, oc] : d.owners) oc.last_cost = 0, oc.last_interval_s = dt_s;
        // One owner's share of this interval: its cost, idle part, energy and GPU-time.
        auto charge = [&](const sys::Owner& owner, MicroUsd cost, MicroUsd idle_cost, double energy_j,
                          double weight) {
          d.idle_cost += idle_cost;
          owner_cost[owner.key()] += cost;
          present.emplace(owner.key(), owner);
          OwnerCounters& oc = d.owners[owner_slot(owner, t0)];
          oc.cost += cost;
          oc.idle_cost += idle_cost;
          oc.last_cost += cost;
          oc.last_interval_s = dt_s;
          oc.energy_j += energy_j;
          oc.gpu_seconds += weight * dt_s;
        };
        for (const auto& sh : a.shares)
          charge(owner_of[sh.pid], sh.cost, sh.idle_cost, sh.energy_j, sh.weight);
        // No process, but the kubelet assigned the GPU (or MIG instances) to pods: nobody else can use it,
        // so its holders pay for the interval, all of it idle. Σ owners + unallocated stays c exactly.
        MicroUsd unallocated = a.unallocated;
        if (held && a.shares.empty() && i < holders_.size() && !holders_[i].empty()) {
          for (const HeldShare& h : split_held_device(c, d.info, holders_[i])) {
            // Idle part as for processes, cost × (1 − utilization): all of it on a GPU nobody runs on; a busy
            // reading here means NVML cannot list its processes.
            const MicroUsd idle = meter::idle_part_micros(h.cost, s.utilization_pct.value_or(0));
            charge(holder_owner(h.holder), h.cost, idle, joules * h.weight, h.weight);
            unallocated = meter::budget_left_micros(unallocated, h.cost);
          }
        }
        d.unallocated_cost += unallocated;
        for (auto& m : d.mig) m.cost += m.integrator.add_ns(dt_ns);
      }
    }
    for (auto& m : d.mig) {
      for (const auto& live : s.mig_instances)
        if (live.uuid == m.instance.uuid && live.memory_used_bytes)
          m.instance.memory_used_bytes = live.memory_used_bytes;
    }
    d.last = std::move(s);
  }
  if (scrapers_) {
    link_endpoints(owner_of, present, t0);
    book_inference(std::move(outcomes), owner_cost, t0);
    if (discovery_) add_discovered_endpoints(owner_of);
  }
  last_owner_of_ = std::move(owner_of);
  last_collection_unix_ms_ = unix_now;
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  ++self_.collections;
  self_.last_collection_s = took_s;
  self_.collection_seconds_total += took_s;
}

void StopSignal::request() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
}

bool StopSignal::wait_ns(std::int64_t ns) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::nanoseconds(ns), [this] { return stop_.load(); });
  return stop_.load();
}

void Collector::run(StopSignal& stop) {
  const std::int64_t interval_ns = options_.interval_ms * 1'000'000;
  std::int64_t next = clock_.monotonic_ns();
  while (!stop.requested()) {
    collect_once();
    const std::int64_t now = clock_.monotonic_ns();
    if (!options_.state_path.empty() && now - last_state_write_ns_ >= options_.state_every_ms * 1'000'000) {
      if (!save_state()) {
        std::lock_guard lock(mu_);
        ++self_.state_write_errors;
      }
      last_state_write_ns_ = now;
    }
    next += interval_ns;
    if (next < now) next = now;  // fell behind (a slow device): start the next interval at once
    if (const std::int64_t wait = next - clock_.monotonic_ns(); wait > 0) stop.wait_ns(wait);
  }
  if (!options_.state_path.empty()) (void)save_state();
}

Snapshot Collector::snapshot() const {
  std::lock_guard lock(mu_);
  Snapshot s;
  s.devices = devices_;
  s.owners = owners_;
  bool other = false;
  for (const auto& d : devices_) other = other || d.owners.count(other_key());
  if (other) s.owners[other_key()] = other_owner();
  s.self = self_;
  fill_inference(s);
  return s;
}

NodeView Collector::node_view() const {
  std::lock_guard lock(mu_);
  NodeView v;
  std::map<std::string, MicroUsd> cost_of;
  for (const auto& d : devices_) {
    NodeView::Gpu g;
    if (d.last && d.last->state == gpu::DeviceState::ok) {
      if (d.last->utilization_pct) g.utilization_pct = *d.last->utilization_pct;
      g.processes = d.last->processes.size();
      for (const auto& p : d.last->processes) {
        g.pids.push_back(p.pid);
        const auto it = last_owner_of_.find(p.pid);
        v.gpu_processes.emplace_back(p.pid, it != last_owner_of_.end() ? it->second : sys::Owner{});
      }
    }
    v.gpus.push_back(g);
    if (!d.price) continue;
    v.node_cost += d.cost;
    for (const auto& [key, oc] : d.owners) cost_of[key] += oc.cost;
  }
  for (const auto& [key, cost] : cost_of) {
    if (key == other_key()) {
      v.owner_costs.emplace_back(other_owner(), cost);
    } else if (const auto it = owners_.find(key); it != owners_.end()) {
      v.owner_costs.emplace_back(it->second, cost);
    }
  }
  return v;
}

ScrapeStats Collector::count_scrape() {
  std::lock_guard lock(mu_);
  ++self_.scrapes;
  return {self_, owners_.size(), node_};
}

IdleAnswer Collector::idle_answer(std::int64_t for_ms) const {
  std::lock_guard lock(mu_);
  std::vector<IdleDevice> devices;
  for (const auto& d : devices_) devices.push_back(IdleDevice{d.info, d.price.has_value(), d.last});
  // A collector more than three intervals (at least 5 s) late is stalled: its GPUs are unknown.
  const std::int64_t stale_ms = std::max<std::int64_t>(5'000, 3 * options_.interval_ms);
  return answer_idle(idle_history_, devices, clock_.unix_ms(), for_ms, last_collection_unix_ms_, stale_ms);
}

void Collector::set_node_status(NodeStatus status) {
  std::lock_guard lock(mu_);
  node_ = std::move(status);
}

std::vector<OwnerTotal> owner_totals(const Snapshot& s) {
  std::map<std::string, OwnerTotal> by_key;
  for (const auto& d : s.devices)
    for (const auto& [key, oc] : d.owners) {
      auto it = s.owners.find(key);
      if (it == s.owners.end()) continue;
      OwnerTotal& t = by_key[key];
      if (t.key.empty()) {
        t.key = key;
        t.owner = it->second;
      }
      if (d.price) {
        t.cost += oc.cost;
        t.idle_cost += oc.idle_cost;
        if (oc.last_interval_s > 0)
          t.micros_per_hour += meter::micros_per_hour(
              oc.last_cost, static_cast<std::int64_t>(std::llround(oc.last_interval_s * 1e9)));
      }
      t.energy_j += oc.energy_j;
      t.gpu_seconds += oc.gpu_seconds;
      t.gpus.push_back(d.info.index);
    }
  std::vector<OwnerTotal> out;
  for (auto& [key, t] : by_key) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(),
                   [](const OwnerTotal& a, const OwnerTotal& b) { return a.cost > b.cost; });
  return out;
}

}  // namespace gm::agent
