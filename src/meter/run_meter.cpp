#include "meter/run_meter.h"

#include <algorithm>
#include <map>

#include "util/units.h"

namespace gm::meter {

Result<std::vector<unsigned>> allocated_gpus(const std::optional<std::string>& cvd,
                                             const std::vector<gpu::DeviceInfo>& devices) {
  std::vector<unsigned> out;
  if (!cvd) {
    for (const auto& d : devices) out.push_back(d.index);
    return out;
  }
  std::size_t pos = 0;
  const std::string& s = *cvd;
  while (pos < s.size()) {
    std::size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    const std::string item(util::trim(s.substr(pos, comma - pos)));
    pos = comma + 1;
    if (item.empty()) continue;
    std::optional<unsigned> found;
    if (item.find_first_not_of("0123456789") == std::string::npos) {
      const unsigned long idx = std::stoul(item);
      for (const auto& d : devices)
        if (d.index == idx) found = d.index;
    } else {
      for (const auto& d : devices)
        if (d.uuid.rfind(item, 0) == 0 || ("GPU-" + item) == d.uuid.substr(0, item.size() + 4))
          found = d.index;
      for (const auto& d : devices)
        for (const auto& m : d.mig_instances)
          if (m.uuid.rfind(item, 0) == 0) found = d.index;
    }
    if (!found)
      return make_error(ErrorKind::usage,
                        "CUDA_VISIBLE_DEVICES entry '" + item + "' matches no GPU on this machine");
    if (std::find(out.begin(), out.end(), *found) == out.end()) out.push_back(*found);
  }
  return out;
}

RunMeter::RunMeter(gpu::GpuBackend& backend, std::vector<unsigned> allocated, MicroUsd price,
                   std::int64_t start_ns)
    : backend_(backend),
      allocated_(std::move(allocated)),
      price_(price),
      start_ns_(start_ns),
      last_ns_(start_ns) {
  for (unsigned idx : allocated_) {
    cost_.emplace_back(price_);
    energy_.emplace_back();
    GpuUsage u;
    u.index = idx;
    for (const auto& d : backend_.devices()) {
      if (d.index != idx) continue;
      u.uuid = d.uuid;
      u.name = d.name;
      u.mem_total_bytes = d.memory_total_bytes;
    }
    usage_.push_back(u);
    // A first reading at the start, so the energy of the first interval is measured too.
    latest_.push_back(backend_.sample(idx));
    energy_.back().add(latest_.back());
  }
  util_sum_.assign(allocated_.size(), 0);
  mem_sum_.assign(allocated_.size(), 0);
  util_n_.assign(allocated_.size(), 0);
  mem_n_.assign(allocated_.size(), 0);
  idle_since_ns_ = start_ns;
}

std::vector<store::SampleRecord> RunMeter::tick(std::int64_t now_ns,
                                                const std::set<std::uint32_t>& job_pids) {
  return tick_with(now_ns, [&job_pids](unsigned, const gpu::DeviceSample& s) {
    return std::any_of(s.processes.begin(), s.processes.end(),
                       [&](const gpu::ProcessSample& p) { return job_pids.count(p.pid) > 0; });
  });
}

std::vector<store::SampleRecord> RunMeter::tick_with(std::int64_t now_ns, const JobOnGpu& job_on_gpu) {
  std::vector<store::SampleRecord> out;
  const std::int64_t dt_ns = std::max<std::int64_t>(0, now_ns - last_ns_);
  bool all_idle = !allocated_.empty();
  for (std::size_t i = 0; i < allocated_.size(); ++i) {
    gpu::DeviceSample s = backend_.sample(allocated_[i]);
    GpuUsage& u = usage_[i];
    store::SampleRecord r;
    r.t_ms = (now_ns - start_ns_) / 1'000'000;
    r.gpu_index = allocated_[i];
    r.gpu_uuid = u.uuid;
    r.cost_micros = cost_[i].add_ns(dt_ns);
    r.energy_j = energy_[i].add(s);
    u.energy_j = energy_[i].total_j();
    u.cost_micros = cost_[i].total();
    if (s.utilization_pct) {
      const double util = std::min<double>(100.0, *s.utilization_pct);
      r.utilization_pct = util;
      util_sum_[i] += util;
      ++util_n_[i];
      u.util_avg_pct = util_sum_[i] / static_cast<double>(util_n_[i]);
      u.util_peak_pct = std::max(u.util_peak_pct.value_or(0.0), util);
      u.busy_s += util / 100.0 * static_cast<double>(dt_ns) / 1e9;
      if (util >= kIdleUtilPct) all_idle = false;
    } else {
      all_idle = false;  // unknown is not idle
    }
    if (s.memory_used_bytes) {
      r.memory_used_bytes = s.memory_used_bytes;
      mem_sum_[i] += static_cast<double>(*s.memory_used_bytes);
      ++mem_n_[i];
      u.mem_avg_bytes = static_cast<std::uint64_t>(mem_sum_[i] / static_cast<double>(mem_n_[i]));
      u.mem_peak_bytes = std::max(u.mem_peak_bytes.value_or(0), *s.memory_used_bytes);
    }
    if (s.power_mw) r.power_w = *s.power_mw / 1000.0;
    if (s.temperature_c) r.temperature_c = *s.temperature_c;
    r.job_present = job_on_gpu(allocated_[i], s);
    if (r.job_present) u.used = true;
    r.gpm = gpm_record(s.gpm);
    const bool worked = interval_did_work(r.utilization_pct, r.gpm);
    if (!u.first_busy_ms && worked) u.first_busy_ms = (last_ns_ - start_ns_) / 1'000'000;
    if (!u.first_process_ms && r.job_present) u.first_process_ms = (last_ns_ - start_ns_) / 1'000'000;
    ++u.samples;
    u.activity.add(r.gpm, r.utilization_pct ? worked : r.job_present);
    {
      const double idle_frac = r.utilization_pct ? 1.0 - *r.utilization_pct / 100.0 : 0.0;
      u.idle_cost_micros += static_cast<MicroUsd>(static_cast<double>(r.cost_micros) * idle_frac);
    }
    latest_[i] = std::move(s);
    out.push_back(std::move(r));
  }
  if (!all_idle)
    idle_since_ns_.reset();
  else if (!idle_since_ns_)
    idle_since_ns_ = last_ns_;
  last_ns_ = now_ns;
  return out;
}

MicroUsd RunMeter::spent_micros() const {
  MicroUsd t = 0;
  for (const auto& c : cost_) t += c.total();
  return t;
}

MicroUsd RunMeter::spent_at(std::int64_t now_ns) const {
  const std::int64_t ms = std::max<std::int64_t>(0, now_ns - start_ns_) / 1'000'000;
  return util::cost_for_ms(price_ * static_cast<MicroUsd>(allocated_.size()), ms);
}

double RunMeter::burn_usd_per_s() const {
  return gm::meter::burn_usd_per_s(price_, allocated_.size());
}

std::optional<std::int64_t> RunMeter::idle_for_ms(std::int64_t now_ns) const {
  if (!idle_since_ns_ || last_ns_ == start_ns_) return std::nullopt;
  return (now_ns - *idle_since_ns_) / 1'000'000;
}

std::vector<std::string> RunMeter::used_uuids() const {
  std::vector<std::string> v;
  for (const auto& u : usage_)
    if (u.used) v.push_back(u.uuid);
  return v;
}

std::vector<std::string> RunMeter::allocated_uuids() const {
  std::vector<std::string> v;
  for (const auto& u : usage_) v.push_back(u.uuid);
  return v;
}

double RunMeter::energy_j() const {
  double t = 0;
  for (const auto& e : energy_) t += e.total_j();
  return t;
}

store::RunEnergyMethod RunMeter::energy_method() const {
  std::set<gpu::EnergyMethod> methods;
  for (const auto& e : energy_) methods.insert(e.method());
  if (methods.size() > 1) methods.erase(gpu::EnergyMethod::none);
  if (methods.empty()) return store::RunEnergyMethod::none;
  if (methods.size() > 1) return store::RunEnergyMethod::mixed;
  switch (*methods.begin()) {
    case gpu::EnergyMethod::counter:
      return store::RunEnergyMethod::counter;
    case gpu::EnergyMethod::power_integration:
      return store::RunEnergyMethod::power_integration;
    case gpu::EnergyMethod::none:
      break;
  }
  return store::RunEnergyMethod::none;
}

std::vector<GpuUsage> gpu_usage_from_samples(const std::vector<store::SampleRecord>& samples) {
  std::map<unsigned, GpuUsage> by;
  std::map<unsigned, std::int64_t> last_t;
  std::map<unsigned, double> usum, msum;
  std::map<unsigned, std::int64_t> un, mn;
  for (const auto& s : samples) {
    GpuUsage& u = by[s.gpu_index];
    u.index = s.gpu_index;
    u.uuid = s.gpu_uuid;
    const std::int64_t prev = last_t.count(s.gpu_index) ? last_t[s.gpu_index] : 0;
    const double dt_s = static_cast<double>(std::max<std::int64_t>(0, s.t_ms - prev)) / 1000.0;
    last_t[s.gpu_index] = s.t_ms;
    ++u.samples;
    u.energy_j += s.energy_j;
    u.cost_micros += s.cost_micros;
    if (s.job_present) u.used = true;
    const bool worked = interval_did_work(s.utilization_pct, s.gpm);
    if (!u.first_busy_ms && worked) u.first_busy_ms = prev;
    if (!u.first_process_ms && s.job_present) u.first_process_ms = prev;
    u.activity.add(s.gpm, s.utilization_pct ? worked : s.job_present);
    if (s.utilization_pct) {
      usum[s.gpu_index] += *s.utilization_pct;
      ++un[s.gpu_index];
      u.util_avg_pct = usum[s.gpu_index] / static_cast<double>(un[s.gpu_index]);
      u.util_peak_pct = std::max(u.util_peak_pct.value_or(0.0), *s.utilization_pct);
      u.busy_s += *s.utilization_pct / 100.0 * dt_s;
    }
    if (s.memory_used_bytes) {
      msum[s.gpu_index] += static_cast<double>(*s.memory_used_bytes);
      ++mn[s.gpu_index];
      u.mem_avg_bytes = static_cast<std::uint64_t>(msum[s.gpu_index] / static_cast<double>(mn[s.gpu_index]));
      u.mem_peak_bytes = std::max(u.mem_peak_bytes.value_or(0), *s.memory_used_bytes);
    }
  }
  struct Stretch {
    std::int64_t start_ms = 0, end_ms = 0, intervals = 0;
    MicroUsd cost = 0;
  };
  std::map<unsigned, Stretch> open;
  std::map<unsigned, std::int64_t> prev_t;
  auto close = [&](unsigned gpu) {
    auto it = open.find(gpu);
    if (it == open.end()) return;
    GpuUsage& u = by[gpu];
    if (it->second.end_ms - it->second.start_ms > u.idle_stretch_ms) {
      u.idle_stretch_start_ms = it->second.start_ms;
      u.idle_stretch_ms = it->second.end_ms - it->second.start_ms;
      u.idle_stretch_intervals = it->second.intervals;
      u.idle_stretch_cost_micros = it->second.cost;
    }
    open.erase(it);
  };
  for (const auto& s : samples) {
    GpuUsage& u = by[s.gpu_index];
    const double idle_frac = s.utilization_pct ? 1.0 - *s.utilization_pct / 100.0 : 0.0;
    u.idle_cost_micros += static_cast<MicroUsd>(static_cast<double>(s.cost_micros) * idle_frac);
    // A sample closes the interval since the previous one of its GPU.
    const std::int64_t from = prev_t.count(s.gpu_index) ? prev_t[s.gpu_index] : 0;
    prev_t[s.gpu_index] = s.t_ms;
    if (s.utilization_pct && *s.utilization_pct < kIdleUtilPct) {
      auto [it, fresh] = open.emplace(s.gpu_index, Stretch{from, from, 0, 0});
      it->second.end_ms = s.t_ms;
      ++it->second.intervals;
      it->second.cost += s.cost_micros;
    } else {
      close(s.gpu_index);
    }
  }
  while (!open.empty()) close(open.begin()->first);
  std::vector<GpuUsage> out;
  for (auto& [i, u] : by) out.push_back(std::move(u));
  return out;
}

}  // namespace gm::meter
