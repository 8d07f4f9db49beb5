// The state file: counters that continue across agent restarts. JSON, written to a temp file and renamed.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "agent/collector.h"
#include "util/file.h"

namespace gm::agent {

namespace {
using nlohmann::json;

json owner_to_json(const sys::Owner& o) {
  return {{"kind", to_string(o.kind)},      {"name", o.name},
          {"namespace", o.pod_namespace},   {"pod", o.pod},
          {"pod_uid", o.pod_uid},           {"container", o.container},
          {"container_id", o.container_id}, {"slurm_job", o.slurm_job},
          {"account", o.slurm_account},     {"user", o.user}};
}

sys::Owner owner_from_json(const json& j) {
  sys::Owner o;
  const std::string kind = j.at("kind").get<std::string>();
  for (sys::OwnerKind k : {sys::OwnerKind::pod, sys::OwnerKind::container, sys::OwnerKind::slurm_job,
                           sys::OwnerKind::slurm_finished, sys::OwnerKind::user, sys::OwnerKind::process,
                           sys::OwnerKind::unresolved, sys::OwnerKind::other})
    if (kind == to_string(k)) o.kind = k;
  o.name = j.at("name").get<std::string>();
  o.pod_namespace = j.value("namespace", "");
  o.pod = j.value("pod", "");
  o.pod_uid = j.value("pod_uid", "");
  o.container = j.value("container", "");
  o.container_id = j.value("container_id", "");
  o.slurm_job = j.value("slurm_job", "");
  o.slurm_account = j.value("account", "");
  o.user = j.value("user", "");
  return o;
}
}  // namespace

Result<void> Collector::save_state() const {
  json devs = json::object();
  {
    std::lock_guard lock(mu_);
    for (const auto& d : devices_) {
      json owners = json::array();
      for (const auto& [key, oc] : d.owners) {
        auto it = owners_.find(key);
        const sys::Owner o = it != owners_.end() ? it->second : other_owner();
        owners.push_back({{"owner", owner_to_json(o)},
                          {"cost_micros", oc.cost},
                          {"idle_cost_micros", oc.idle_cost},
                          {"energy_j", oc.energy_j},
                          {"gpu_seconds", oc.gpu_seconds}});
      }
      json mig = json::object();
      for (const auto& m : d.mig) mig[m.instance.uuid] = m.cost;
      devs[d.info.uuid] = {{"cost_micros", d.cost},
                           {"idle_cost_micros", d.idle_cost},
                           {"unallocated_cost_micros", d.unallocated_cost},
                           {"idle_held_cost_micros", d.idle_held_cost},
                           {"energy_j", d.energy_j},
                           {"seconds", d.seconds},
                           {"owners", owners},
                           {"mig_cost_micros", mig}};
    }
  }
  json inference = json::object();
  {
    std::lock_guard lock(mu_);
    inference = inference_state_json();
  }
  const std::string text = json{
      {"format", "gpumeter-agent-state"},
      {"version", 1},
      {"devices", devs},
      {"inference", inference}}.dump(1);
  const std::string& path = options_.state_path;
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error("--state " + path + ": cannot write " + tmp);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return make_error("--state " + path + ": write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return make_error("--state " + path + ": fsync failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return make_error("--state " + path + ": rename failed");
  }
  return ok_result();
}

Result<void> Collector::load_state() {
  const std::string& path = options_.state_path;
  if (path.empty() || ::access(path.c_str(), F_OK) != 0) return ok_result();
  auto text = util::read_small_file(path);
  if (!text) return make_error("--state " + path + ": cannot read");
  json j;
  try {
    j = json::parse(*text);
    if (j.value("format", "") != "gpumeter-agent-state" || j.value("version", 0) != 1)
      return make_error("--state " + path + ": not a gpumeter agent state file (format/version)");
    std::lock_guard lock(mu_);
    for (auto& d : devices_) {
      if (!j["devices"].contains(d.info.uuid)) continue;  // a device new since the last run starts at 0
      const json& dj = j["devices"][d.info.uuid];
      d.cost = dj.at("cost_micros").get<MicroUsd>();
      d.idle_cost = dj.at("idle_cost_micros").get<MicroUsd>();
      d.unallocated_cost = dj.at("unallocated_cost_micros").get<MicroUsd>();
      d.idle_held_cost = dj.value("idle_held_cost_micros", MicroUsd{0});  // absent in older state files
      d.energy_j = dj.at("energy_j").get<double>();
      d.seconds = dj.value("seconds", 0.0);
      for (auto& m : d.mig)
        if (dj.contains("mig_cost_micros") && dj["mig_cost_micros"].contains(m.instance.uuid))
          m.cost = dj["mig_cost_micros"][m.instance.uuid].get<MicroUsd>();
      for (const json& oj : dj.at("owners")) {
        const sys::Owner o = owner_from_json(oj.at("owner"));
        std::string key = o.key();
        if (o.kind != sys::OwnerKind::other) {
          if (!owners_.count(key) && owners_.size() >= options_.max_owners)
            key = other_owner().key();
          else {
            owners_[key] = o;
            owner_seen_ns_[key] = clock_.monotonic_ns();
          }
        }
        OwnerCounters& oc = d.owners[key];
        oc.cost += oj.at("cost_micros").get<MicroUsd>();
        oc.idle_cost += oj.value("idle_cost_micros", MicroUsd{0});
        oc.energy_j += oj.at("energy_j").get<double>();
        oc.gpu_seconds += oj.at("gpu_seconds").get<double>();
      }
    }
    if (j.contains("inference")) load_inference_state(j["inference"]);
  } catch (const json::exception& e) {
    return make_error("--state " + path + ": " + e.what());
  }
  return ok_result();
}

// Serving counters: each (owner, model)'s totals and cost, and each endpoint's last raw counter values with
// its owner, so that after a restart the first scrape counts what was served since the save (never twice,
// none lost). Held under mu_.
nlohmann::json Collector::inference_state_json() const {
  json models = json::array();
  for (const auto& [key, ic] : inference_) {
    models.push_back({{"owner", owner_to_json(ic.owner)},
                      {"model", ic.model},
                      {"engine", to_string(ic.engine)},
                      {"prompt_tokens", ic.prompt_tokens},
                      {"generated_tokens", ic.generated_tokens},
                      {"cached_tokens", ic.cached_tokens},
                      {"requests", ic.requests},
                      {"has", {ic.has_prompt, ic.has_generated, ic.has_cached, ic.has_requests}},
                      {"cost_micros", ic.cost}});
  }
  json endpoints = json::array();
  for (const auto& e : endpoints_) {
    if (!e->owner || !e->fold.baselined()) continue;
    json prev = json::object();
    for (const auto& [model, d] : e->fold.previous()) {
      json v = json::array();
      for (const auto& x : d) v.push_back(x ? json(*x) : json(nullptr));
      prev[model] = v;
    }
    const auto start_time_s = e->fold.start_time_s();
    endpoints.push_back({{"endpoint", e->spec.display},
                         {"owner", owner_to_json(*e->owner)},
                         {"start_time_s", start_time_s ? json(*start_time_s) : json(nullptr)},
                         {"counters", prev}});
  }
  return json{{"models", models}, {"endpoints", endpoints}};
}

void Collector::load_inference_state(const nlohmann::json& j) {
  for (const json& mj : j.at("models")) {
    InferenceModelCounters ic;
    ic.owner = owner_from_json(mj.at("owner"));
    ic.model = mj.at("model").get<std::string>();
    const std::string engine = mj.value("engine", "vllm");
    for (serving::InferenceEngine e : {serving::InferenceEngine::vllm, serving::InferenceEngine::sglang,
                                       serving::InferenceEngine::tgi, serving::InferenceEngine::triton})
      if (engine == to_string(e)) ic.engine = e;
    ic.prompt_tokens = mj.at("prompt_tokens").get<double>();
    ic.generated_tokens = mj.at("generated_tokens").get<double>();
    ic.cached_tokens = mj.at("cached_tokens").get<double>();
    ic.requests = mj.at("requests").get<double>();
    const json& has = mj.at("has");
    ic.has_prompt = has.at(0).get<bool>();
    ic.has_generated = has.at(1).get<bool>();
    ic.has_cached = has.at(2).get<bool>();
    ic.has_requests = has.at(3).get<bool>();
    ic.cost = mj.at("cost_micros").get<MicroUsd>();
    inference_[{ic.owner.key(), ic.model}] = std::move(ic);
  }
  for (const json& ej : j.at("endpoints")) {
    const std::string display = ej.at("endpoint").get<std::string>();
    for (auto& e : endpoints_) {
      if (e->spec.display != display) continue;  // an endpoint no longer configured is dropped
      e->resume_owner_key = owner_from_json(ej.at("owner")).key();
      if (!ej.at("start_time_s").is_null()) e->resume_start_time_s = ej.at("start_time_s").get<double>();
      for (const auto& [model, v] : ej.at("counters").items()) {
        std::array<std::optional<double>, 4> prev;
        for (std::size_t f = 0; f < 4 && f < v.size(); ++f)
          if (!v.at(f).is_null()) prev[f] = v.at(f).get<double>();
        e->resume_prev[model] = prev;
      }
    }
  }
}

}  // namespace gm::agent
