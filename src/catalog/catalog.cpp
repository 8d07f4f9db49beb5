#include "catalog/catalog.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "util/csv.h"
#include "util/embedded.h"
#include "util/file.h"
#include "util/units.h"

namespace gm::catalog {

namespace {

// Lower-cased alphanumerics only; "SXM4"/"SXM5"/"SXM2" collapse to "sxm" so loose spellings match.
std::string norm(std::string_view s) {
  static const std::regex sxm("sxm[0-9](?![0-9])");
  const std::string lower = std::regex_replace(util::to_lower(s), sxm, "sxm");
  std::string out;
  for (char c : lower)
    if (std::isalnum(static_cast<unsigned char>(c))) out += c;
  return out;
}

struct Cols {
  const util::CsvTable& t;
  const util::CsvRow& r;
  std::string get(const char* name) const {
    const int i = t.column(name);
    return i < 0 ? std::string() : std::string(util::trim(r.fields[static_cast<std::size_t>(i)]));
  }
};

Result<std::optional<double>> opt_num(const Cols& c, const char* name, std::string_view origin) {
  const std::string v = c.get(name);
  if (v.empty()) return std::optional<double>();
  auto n = util::parse_number(v);
  if (!n)
    return make_error(
        fmt::format("{}:{}: column {}: '{}' is not a non-negative number", origin, c.r.line, name, v));
  return std::optional<double>(*n);
}

Result<void> require_columns(const util::CsvTable& t, std::initializer_list<const char*> names,
                             std::string_view origin) {
  for (const char* n : names)
    if (t.column(n) < 0) return make_error(fmt::format("{}:1: missing column '{}'", origin, n));
  return ok_result();
}

Result<std::vector<GpuSpec>> load_gpus(std::string_view text, std::string_view origin) {
  GM_TRY(auto t, util::parse_csv(text, origin));
  GM_TRY_VOID(require_columns(t, {"id", "family", "memory_gb"}, origin));
  std::vector<GpuSpec> out;
  for (const auto& r : t.rows) {
    Cols c{t, r};
    GpuSpec g;
    g.id = c.get("id");
    g.family = c.get("family");
    g.architecture = c.get("architecture");
    GM_TRY(auto mem, opt_num(c, "memory_gb", origin));
    if (!mem) return make_error(fmt::format("{}:{}: memory_gb is missing", origin, r.line));
    g.memory_gb = *mem;
    // HBM sizes on datasheets are binary-ish (80 GB boards report 81559 MiB): count GiB.
    g.memory_bytes = static_cast<std::uint64_t>(g.memory_gb * 1024.0 * 1024.0 * 1024.0);
    GM_TRY(g.mem_bw_gbps, opt_num(c, "mem_bw_gbps", origin));
    GM_TRY(g.fp32_tflops, opt_num(c, "fp32_tflops", origin));
    GM_TRY(g.tf32_dense_tflops, opt_num(c, "tf32_dense_tflops", origin));
    GM_TRY(g.bf16_dense_tflops, opt_num(c, "bf16_dense_tflops", origin));
    GM_TRY(g.fp16_dense_tflops, opt_num(c, "fp16_dense_tflops", origin));
    GM_TRY(g.fp8_dense_tflops, opt_num(c, "fp8_dense_tflops", origin));
    GM_TRY(g.int8_dense_tops, opt_num(c, "int8_dense_tops", origin));
    GM_TRY(g.tdp_w, opt_num(c, "tdp_w", origin));
    GM_TRY(g.interconnect_gbps, opt_num(c, "interconnect_gbps", origin));
    g.interconnect = c.get("interconnect");
    g.source = c.get("source");
    if (g.id.empty()) return make_error(fmt::format("{}:{}: empty id", origin, r.line));
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<InstanceGpus> load_instance_gpus() {
  std::vector<InstanceGpus> out;
  auto text = util::embedded_file("instance_gpus.csv");
  if (!text) return out;
  auto t = util::parse_csv(*text, "instance_gpus.csv");
  if (!t) return out;
  for (const auto& r : t->rows) {
    Cols c{*t, r};
    InstanceGpus g;
    g.provider = util::to_lower(c.get("provider"));
    g.instance = c.get("instance");
    g.gpu = c.get("gpu");
    auto count = util::parse_number(c.get("gpu_count"));
    if (!count || *count <= 0 || g.instance.empty()) continue;
    g.gpu_count = *count;
    if (auto v = util::parse_number(c.get("vcpus"))) g.vcpus = *v;
    if (auto m = util::parse_number(c.get("memory_gib"))) g.memory_gib = *m;
    g.host_family = c.get("host_family");
    g.gpu_sku = c.get("gpu_sku");
    g.source = c.get("source");
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::vector<Offer>> load_offers(std::string_view text, std::string_view origin, bool user) {
  GM_TRY(auto t, util::parse_csv(text, origin));
  GM_TRY_VOID(require_columns(
      t, {"provider", "region", "instance", "gpu", "gpu_count", "ondemand_usd_per_hour"}, origin));
  std::vector<Offer> out;
  for (const auto& r : t.rows) {
    Cols c{t, r};
    Offer o;
    o.provider = util::to_lower(c.get("provider"));
    o.region = c.get("region");
    o.instance = c.get("instance");
    o.gpu = c.get("gpu");
    if (o.provider.empty() || o.instance.empty())
      return make_error(fmt::format("{}:{}: provider and instance must not be empty", origin, r.line));
    GM_TRY(auto count, opt_num(c, "gpu_count", origin));
    o.gpu_count = count.value_or(0);
    const std::string kind = c.get("kind");
    if (kind != "host_vm" && kind != "gpu_only") {
      // A row without its GPU count (or model) takes it from the documented instance family.
      if (const InstanceGpus* fam = find_instance_gpus(o.provider, o.instance)) {
        if (!count) o.gpu_count = fam->gpu_count;
        if (o.gpu.empty()) o.gpu = fam->gpu;
      }
    }
    GM_TRY(o.vcpus, opt_num(c, "vcpus", origin));
    GM_TRY(o.memory_gib, opt_num(c, "memory_gib", origin));
    GM_TRY(o.ondemand_usd_per_hour, opt_num(c, "ondemand_usd_per_hour", origin));
    GM_TRY(o.spot_usd_per_hour, opt_num(c, "spot_usd_per_hour", origin));
    for (const auto& price : {o.ondemand_usd_per_hour, o.spot_usd_per_hour}) {
      if (price && o.gpu_count > 0 &&
          *price / o.gpu_count > kMaxUsdPerGpuHour)  // check_money: allow (below meter)
        return make_error(fmt::format("{}:{}: ${}/h for {} GPUs is more than ${} per GPU-hour", origin,
                                      r.line, *price, o.gpu_count, kMaxUsdPerGpuHour));
    }
    if (kind == "gpu_only") o.flags.push_back("gpu_only_needs_host_vm");
    if (kind == "host_vm") o.flags.push_back("host_vm_row");
    o.source = c.get("source");
    o.date = c.get("date");
    o.fetched_at = c.get("fetched_at");
    if (user) {
      o.user_override = true;
      if (o.source.empty()) o.source = std::string(origin);
    }
    out.push_back(std::move(o));
  }
  return out;
}

Result<std::vector<BillingRule>> load_billing(std::string_view text, std::string_view origin) {
  GM_TRY(auto t, util::parse_csv(text, origin));
  GM_TRY_VOID(require_columns(t, {"provider", "rule", "value", "unit"}, origin));
  std::map<std::string, BillingRule> rules;
  for (const auto& r : t.rows) {
    Cols c{t, r};
    const std::string provider = util::to_lower(c.get("provider"));
    const std::string rule = c.get("rule");
    const std::string unit = c.get("unit");
    const std::string value = c.get("value");
    auto& b = rules[provider];
    b.provider = provider;
    if (value.empty()) continue;
    auto v = util::parse_number(value);
    if (!v) continue;  // e.g. bucket lists; not a number rule
    const double mult = unit == "minute" ? 60 : unit == "hour" ? 3600 : 1;
    const auto seconds = static_cast<std::int64_t>(std::llround(*v * mult));
    if (rule == "billing_granularity" && (unit == "second" || unit == "minute" || unit == "hour")) {
      b.granularity_s = std::max<std::int64_t>(1, seconds);
      if (!b.source.empty()) b.source += "; ";
      b.source += c.get("source");
    } else if (rule == "minimum_billed_duration") {
      b.minimum_s = seconds;
    } else if (rule == "interruption_notice" || rule == "preemption_notice" || rule == "eviction_notice") {
      b.spot_notice_s = seconds;
    }
  }
  std::vector<BillingRule> out;
  for (auto& [k, v] : rules) out.push_back(v);
  return out;
}

Result<std::vector<CarbonIntensity>> load_carbon(std::string_view text, std::string_view origin) {
  GM_TRY(auto t, util::parse_csv(text, origin));
  GM_TRY_VOID(require_columns(t, {"dataset", "provider", "region", "g_co2e_per_kwh"}, origin));
  std::vector<CarbonIntensity> out;
  for (const auto& r : t.rows) {
    Cols c{t, r};
    GM_TRY(auto g, opt_num(c, "g_co2e_per_kwh", origin));
    if (!g) continue;
    out.push_back({c.get("dataset"), util::to_lower(c.get("provider")), c.get("region"), c.get("location"),
                   *g, c.get("source")});
  }
  return out;
}

Result<std::vector<Pue>> load_pue(std::string_view text, std::string_view origin) {
  GM_TRY(auto t, util::parse_csv(text, origin));
  GM_TRY_VOID(require_columns(t, {"provider", "region", "pue"}, origin));
  std::vector<Pue> out;
  for (const auto& r : t.rows) {
    Cols c{t, r};
    GM_TRY(auto p, opt_num(c, "pue", origin));
    if (!p) continue;
    out.push_back({util::to_lower(c.get("provider")), c.get("region"), *p, c.get("source")});
  }
  return out;
}

struct DeviceName {
  std::string vendor;
  std::string pattern;
  std::string gpu;
};

const std::vector<DeviceName>& device_names() {
  static const std::vector<DeviceName> names = [] {
    std::vector<DeviceName> out;
    auto text = util::embedded_file("device_names.csv");
    if (!text) return out;
    auto t = util::parse_csv(*text, "device_names.csv");
    if (!t) return out;
    for (const auto& r : t->rows)
      out.push_back({util::to_lower(r.fields[0]), util::to_lower(r.fields[1]), r.fields[2]});
    return out;
  }();
  return names;
}

// GPUs an instance type holds, from the providers' naming schemes; nullopt when the name says nothing.
std::optional<double> expected_gpu_count(const std::string& provider, const std::string& instance) {
  if (const InstanceGpus* fam = find_instance_gpus(provider, instance)) return fam->gpu_count;
  std::smatch m;
  if (provider == "gcp") {
    static const std::regex re(R"(-(\d+)g$)");
    if (std::regex_search(instance, m, re)) return std::stod(m[1]);
    static const std::regex only(R"(^gpu-only-.*x(\d+)$)");
    if (std::regex_search(instance, m, only)) return std::stod(m[1]);
    return std::nullopt;
  }
  if (provider == "lambda") {
    static const std::regex re(R"(^gpu_(\d+)x_)");
    if (std::regex_search(instance, m, re)) return std::stod(m[1]);
    return std::nullopt;
  }
  if (provider == "azure") {
    static const std::regex nd(R"(^Standard_ND\d+.*_v[45]$)");
    if (std::regex_match(instance, nd)) return 8;
    static const std::regex nc_h100(R"(^Standard_NC(\d+)ad.*H100)");
    if (std::regex_search(instance, m, nc_h100)) return std::stod(m[1]) / 40;
    static const std::regex nc_a100(R"(^Standard_NC(\d+)ads_A100)");
    if (std::regex_search(instance, m, nc_a100)) return std::stod(m[1]) / 24;
    return std::nullopt;
  }
  if (provider == "aws") {
    static const std::map<std::string, double> known = {
        {"p5.48xlarge", 8},  {"p5e.48xlarge", 8},  {"p5en.48xlarge", 8}, {"p6-b200.48xlarge", 8},
        {"p4d.24xlarge", 8}, {"p4de.24xlarge", 8}, {"p3.2xlarge", 1},    {"p3.8xlarge", 4},
        {"p3.16xlarge", 8},  {"p3dn.24xlarge", 8}, {"g5.12xlarge", 4},   {"g5.24xlarge", 4},
        {"g5.48xlarge", 8},  {"g6.12xlarge", 4},   {"g6.24xlarge", 4},   {"g6.48xlarge", 8},
        {"g6e.12xlarge", 4}, {"g6e.24xlarge", 4},  {"g6e.48xlarge", 8},  {"g4dn.12xlarge", 4},
        {"g4dn.metal", 8}};
    if (auto it = known.find(instance); it != known.end()) return it->second;
    static const std::regex single(R"(^(g4dn|g5|g6|g6e)\.(x|2x|4x|8x|16x)large$)");
    if (std::regex_match(instance, single)) return 1;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

const std::vector<InstanceGpus>& instance_gpus_table() {
  static const std::vector<InstanceGpus> table = load_instance_gpus();
  return table;
}

const InstanceGpus* find_instance_gpus(std::string_view provider, std::string_view instance) {
  const std::string p = util::to_lower(provider);
  for (const auto& g : instance_gpus_table())
    if (g.provider == p && g.instance == instance) return &g;
  return nullptr;
}

std::optional<double> Offer::usd_per_gpu_hour(bool spot) const {
  const auto& price = spot ? spot_usd_per_hour : ondemand_usd_per_hour;
  if (!price || gpu_count <= 0) return std::nullopt;
  return *price / gpu_count;  // check_money: allow (catalog is below meter)
}

void flag_offers(std::vector<Offer>& offers, const std::vector<GpuSpec>& gpus) {
  std::set<std::string> known;
  for (const auto& g : gpus) known.insert(g.id);
  for (auto& o : offers) {
    auto add = [&](const char* f) {
      if (std::find(o.flags.begin(), o.flags.end(), f) == o.flags.end()) o.flags.push_back(f);
    };
    const bool host_vm = std::find(o.flags.begin(), o.flags.end(), "host_vm_row") != o.flags.end();
    if (!o.ondemand_usd_per_hour)
      add("missing_ondemand_price");
    else if (*o.ondemand_usd_per_hour <= 0)
      add("zero_price");
    if (o.spot_usd_per_hour && *o.spot_usd_per_hour <= 0) add("zero_spot_price");
    if (o.spot_usd_per_hour && o.ondemand_usd_per_hour) {
      if (*o.spot_usd_per_hour > *o.ondemand_usd_per_hour)
        add("spot_above_ondemand");
      else if (*o.spot_usd_per_hour == *o.ondemand_usd_per_hour)
        add("spot_equals_ondemand");
    }
    if (host_vm) continue;
    if (o.gpu_count <= 0) add("gpu_count_missing");
    if (auto expected = expected_gpu_count(o.provider, o.instance);
        expected && o.gpu_count > 0 && std::fabs(*expected - o.gpu_count) > 1e-9 && o.gpu_count >= 1)
      add("gpu_count_mismatch");
    if (!o.gpu.empty() && !known.count(o.gpu)) add("gpu_not_in_specs");
  }
}

Result<Catalog> Catalog::from_csv(std::string_view gpus_csv, std::string_view offers_csv,
                                  std::string_view billing_csv, std::string_view carbon_csv,
                                  std::string_view pue_csv) {
  Catalog c;
  GM_TRY(c.gpus_, load_gpus(gpus_csv, "gpus.csv"));
  GM_TRY(c.offers_, load_offers(offers_csv, "offers.csv", false));
  GM_TRY(c.billing_, load_billing(billing_csv, "billing.csv"));
  GM_TRY(c.carbon_, load_carbon(carbon_csv, "carbon.csv"));
  GM_TRY(c.pue_, load_pue(pue_csv, "pue.csv"));
  flag_offers(c.offers_, c.gpus_);
  return c;
}

Result<Catalog> Catalog::builtin() {
  auto get = [](const char* name) -> Result<std::string_view> {
    auto f = util::embedded_file(name);
    if (!f) return make_error(fmt::format("built-in catalog file {} is missing from this build", name));
    return *f;
  };
  GM_TRY(auto gpus, get("gpus.csv"));
  GM_TRY(auto offers, get("offers.csv"));
  GM_TRY(auto billing, get("billing.csv"));
  GM_TRY(auto carbon, get("carbon.csv"));
  GM_TRY(auto pue, get("pue.csv"));
  return from_csv(gpus, offers, billing, carbon, pue);
}

Result<void> Catalog::merge_offers_file(const std::string& path) {
  auto text = util::read_small_file(path);
  if (!text) return make_error(ErrorKind::usage, fmt::format("{}: cannot read the offers file", path));
  GM_TRY(auto extra, load_offers(*text, path, true));
  for (auto& o : extra) {
    if (o.gpu.empty()) {
      // not a GPU row; allowed only for host VMs
    } else if (const GpuSpec* g = find_gpu(o.gpu)) {
      o.gpu = g->id;
    }
    auto same = std::find_if(offers_.begin(), offers_.end(), [&](const Offer& b) {
      return b.provider == o.provider && b.region == o.region && b.instance == o.instance;
    });
    if (same != offers_.end())
      *same = std::move(o);
    else
      offers_.push_back(std::move(o));
  }
  for (auto& o : offers_) {
    // re-run the checks on every row so user rows are flagged too
    std::erase_if(o.flags,
                  [](const std::string& f) { return f != "gpu_only_needs_host_vm" && f != "host_vm_row"; });
  }
  flag_offers(offers_, gpus_);
  return ok_result();
}

const GpuSpec* Catalog::find_gpu(std::string_view name) const {
  const std::string q = norm(name);
  if (q.empty()) return nullptr;
  for (const auto& g : gpus_)
    if (norm(g.id) == q) return &g;
  const auto mem = [](const GpuSpec& g) { return fmt::format("{}gb", static_cast<int>(g.memory_gb)); };
  for (const auto& g : gpus_) {
    const std::string fam = norm(g.family);
    const std::string form = norm(g.id.substr(g.family.size()));  // " SXM 80GB" -> "sxm80gb"
    for (const std::string& key : {fam, fam + mem(g), fam + form})
      if (key == q) return &g;
    // family + form without memory ("h100sxm", "a100pcie")
    if (form.size() > mem(g).size() && fam + form.substr(0, form.size() - mem(g).size()) == q) return &g;
  }
  return nullptr;
}

const GpuSpec* Catalog::gpu_for_device_name(std::string_view device_name, std::string_view vendor) const {
  const std::string lname = util::to_lower(device_name);
  const std::string lvendor = util::to_lower(vendor);
  // A pattern ending in a digit must not stop inside a longer number: "NVIDIA A10" is not
  // "NVIDIA A100-PG509-200", "NVIDIA L4" is not "NVIDIA L40".
  auto matches = [&](const std::string& pattern) {
    for (std::size_t at = lname.find(pattern); at != std::string::npos; at = lname.find(pattern, at + 1)) {
      const std::size_t end = at + pattern.size();
      const bool digit_end = !pattern.empty() && std::isdigit(static_cast<unsigned char>(pattern.back()));
      if (!digit_end || end == lname.size() || !std::isdigit(static_cast<unsigned char>(lname[end])))
        return true;
    }
    return false;
  };
  for (const auto& n : device_names())
    if ((lvendor.empty() || n.vendor == lvendor) && matches(n.pattern)) {
      for (const auto& g : gpus_)
        if (g.id == n.gpu) return &g;
      return nullptr;
    }
  return nullptr;
}

std::string Catalog::suggest_gpu(std::string_view name) const {
  std::vector<std::string> names;
  for (const auto& g : gpus_)
    if (std::find(names.begin(), names.end(), g.family) == names.end()) names.push_back(g.family);
  for (const auto& g : gpus_) names.push_back(g.id);
  for (const auto& o : offers_)
    if (!o.gpu.empty() && std::find(names.begin(), names.end(), o.gpu) == names.end()) names.push_back(o.gpu);
  return util::suggest_names(name, names, 4);
}

const Offer* Catalog::find_offer(std::string_view provider, std::string_view instance,
                                 std::optional<std::string_view> region) const {
  const Offer* best = nullptr;
  const std::string p = util::to_lower(provider);
  for (const auto& o : offers_) {
    if (o.provider != p || o.instance != instance) continue;
    if (region && o.region != *region) continue;
    if (!o.ondemand_usd_per_hour || o.gpu.empty()) continue;  // host-VM-only rows are not GPU offers
    if (!best || *o.ondemand_usd_per_hour < *best->ondemand_usd_per_hour) best = &o;
  }
  return best;
}

const Offer* Catalog::find_offer_by_instance(std::string_view instance) const {
  const Offer* best = nullptr;
  for (const auto& o : offers_) {
    if (o.instance != instance || !o.ondemand_usd_per_hour || o.gpu.empty()) continue;
    if (!best || *o.ondemand_usd_per_hour < *best->ondemand_usd_per_hour) best = &o;
  }
  return best;
}

std::optional<ReferencePrice> Catalog::reference_price(std::string_view gpu_id) const {
  static const std::set<std::string> disqualifying = {"gpu_only_needs_host_vm", "host_vm_row",
                                                      "missing_ondemand_price", "zero_price",
                                                      "gpu_count_missing",      "gpu_count_mismatch"};
  std::vector<double> prices;
  for (const auto& o : offers_) {
    if (o.gpu != gpu_id) continue;
    bool bad = false;
    for (const auto& f : o.flags) bad = bad || disqualifying.count(f);
    if (bad) continue;
    if (auto p = o.usd_per_gpu_hour()) prices.push_back(*p);
  }
  if (prices.empty()) return std::nullopt;
  std::sort(prices.begin(), prices.end());
  const std::size_t n = prices.size();
  const double median = n % 2 ? prices[n / 2] : (prices[n / 2 - 1] + prices[n / 2]) / 2;
  return ReferencePrice{median, n, std::string(gpu_id)};
}

BillingRule Catalog::billing_rule(std::string_view provider) const {
  const std::string p = util::to_lower(provider);
  for (const auto& b : billing_)
    if (b.provider == p) return b;
  BillingRule r;
  r.provider = p;
  r.granularity_s = 1;
  r.minimum_s = 0;
  r.source = p.empty()
                 ? "no provider: billed per second, no minimum"
                 : fmt::format("no billing rule for '{}' in the catalog: per second, no minimum assumed", p);
  return r;
}

const CarbonIntensity* Catalog::carbon_for(std::string_view provider, std::string_view region,
                                           std::string_view dataset) const {
  const std::string p = util::to_lower(provider);
  static const char* preferred[] = {"cloud-carbon-footprint", "codecarbon", "cloud-carbon-footprint-cfe",
                                    "ccf-derived-thirdparty-unverified"};
  auto find = [&](std::string_view ds) -> const CarbonIntensity* {
    for (const auto& c : carbon_)
      if (c.provider == p && c.region == region && c.dataset == ds) return &c;
    return nullptr;
  };
  if (!dataset.empty()) return find(dataset);
  for (const char* ds : preferred)
    if (auto* c = find(ds)) return c;
  for (const auto& c : carbon_)
    if (c.provider == p && c.region == region) return &c;
  return nullptr;
}

std::optional<Pue> Catalog::pue_for(std::string_view provider, std::string_view region) const {
  const std::string p = util::to_lower(provider);
  for (const auto& x : pue_)
    if (x.provider == p && x.region == region) return x;
  for (const auto& x : pue_)
    if (x.provider == p && x.region == "*") return x;
  return std::nullopt;
}

std::string Catalog::newest_price_date(std::string_view provider) const {
  std::string newest;
  for (const auto& o : offers_)
    if (provider.empty() || o.provider == provider) newest = std::max(newest, o.date);
  return newest;
}

namespace {

std::string number_text(const std::optional<double>& v) {
  return v ? fmt::format("{}", *v) : std::string();
}

}  // namespace

std::string offers_to_csv(const std::vector<Offer>& offers) {
  std::string out =
      "provider,region,instance,gpu,gpu_count,vcpus,memory_gib,ondemand_usd_per_hour,spot_usd_per_hour,kind,"
      "source,"
      "date,fetched_at\n";
  for (const auto& o : offers) {
    const bool host_vm = std::find(o.flags.begin(), o.flags.end(), "host_vm_row") != o.flags.end();
    const bool gpu_only =
        std::find(o.flags.begin(), o.flags.end(), "gpu_only_needs_host_vm") != o.flags.end();
    const std::string fields[] = {o.provider,
                                  o.region,
                                  o.instance,
                                  o.gpu,
                                  o.gpu_count > 0 ? fmt::format("{}", o.gpu_count) : std::string(),
                                  number_text(o.vcpus),
                                  number_text(o.memory_gib),
                                  number_text(o.ondemand_usd_per_hour),
                                  number_text(o.spot_usd_per_hour),
                                  host_vm    ? "host_vm"
                                  : gpu_only ? "gpu_only"
                                             : "instance",
                                  o.source,
                                  o.date,
                                  o.fetched_at};
    bool first = true;
    for (const auto& f : fields) {
      if (!first) out += ',';
      out += util::csv_escape(f);
      first = false;
    }
    out += '\n';
  }
  return out;
}

Result<std::vector<Offer>> read_offers_file(const std::string& path) {
  auto text = util::read_small_file(path);
  if (!text) return make_error(fmt::format("{}: cannot read the offers file", path));
  return load_offers(*text, path, true);
}

namespace {

constexpr const char* kSystemCatalog = "/var/lib/gpumeter/offers.csv";

}  // namespace

std::string user_catalog_path() {
  if (const char* d = std::getenv("GPUMETER_DATA_DIR"); d && *d) return std::string(d) + "/offers.csv";
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/gpumeter/offers.csv";
  if (::geteuid() == 0) return kSystemCatalog;
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.local/share/gpumeter/offers.csv";
  return kSystemCatalog;
}

std::optional<std::string> existing_user_catalog_path() {
  std::error_code ec;
  const std::string mine = user_catalog_path();
  if (std::filesystem::exists(mine, ec)) return mine;
  // An explicit data directory is the whole answer (tests, the packaged timer); otherwise the node's catalog.
  if (const char* d = std::getenv("GPUMETER_DATA_DIR"); d && *d) return std::nullopt;
  if (std::filesystem::exists(kSystemCatalog, ec)) return std::string(kSystemCatalog);
  return std::nullopt;
}

Result<Catalog> load_catalog(const std::optional<std::string>& catalog_override) {
  GM_TRY(auto catalog, Catalog::builtin());
  if (auto fetched = existing_user_catalog_path()) GM_TRY_VOID(catalog.merge_offers_file(*fetched));
  if (catalog_override) GM_TRY_VOID(catalog.merge_offers_file(*catalog_override));
  return catalog;
}

}  // namespace gm::catalog
