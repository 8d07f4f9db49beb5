// prices update: fetch each provider's price list, turn its rows into offers through the instance family
// table, run the sanity rules against the catalog in use, and merge into the fetched catalog.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

#include "meter/meter.h"
#include "prices/detail/readers.h"
#include "prices/prices.h"
#include "util/enum_text.h"
#include "util/money.h"
#include "util/time.h"
#include "util/units.h"

namespace gm::prices {

using detail::NanoUsd;

namespace {

constexpr std::size_t kMaxJsonPageBytes = 64u << 20;  // one JSON page; the real ones are well under 1 MB
constexpr int kMaxPages = 2000;
constexpr const char* kGcpComputeService = "6F81-5844-456A";

bool starts_with(std::string_view s, std::string_view head) {
  return s.substr(0, head.size()) == head;
}

std::string url_encode(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~')
      out += c;
    else
      out += fmt::format("%{:02X}", u);
  }
  return out;
}

std::string trim_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// Replaces scheme://host[:port] of a provider's absolute link with the configured base (a mirror, a
// stand-in).
std::string rebase(const std::string& link, const std::string& base) {
  const auto scheme = link.find("://");
  if (scheme == std::string::npos) return base + (starts_with(link, "/") ? "" : "/") + link;
  const auto path = link.find('/', scheme + 3);
  return base + (path == std::string::npos ? "/" : link.substr(path));
}

Result<std::string> get_page(HttpGetter& http, const std::string& url, const HttpHeaders& headers) {
  std::string body;
  GM_TRY_VOID(http.get(url, headers, [&](std::string_view piece) {
    if (body.size() + piece.size() > kMaxJsonPageBytes) return false;
    body.append(piece);
    return true;
  }));
  return body;
}

std::optional<util::NanoUsd> nanos_of(const std::optional<double>& usd_per_hour) {
  if (!usd_per_hour) return std::nullopt;
  return util::usd_to_nanos(*usd_per_hour);
}

// A fetched price for one instance in one region, before the sanity rules.
struct Candidate {
  const catalog::InstanceGpus* family = nullptr;
  std::string region;
  std::optional<util::NanoUsd> ondemand, spot;
  std::string ondemand_text, spot_text;
  bool ondemand_seen = false, spot_seen = false;
  bool spot_from_catalog = false;
  std::string source;
};

using CandidateKey = std::pair<std::string, std::string>;  // region, instance

struct ProviderFetch {
  std::map<CandidateKey, Candidate> candidates;
  std::set<std::string> unknown;  // "region instance"
};

void note_price(ProviderFetch& f, const detail::RawPrice& p, Provider provider, const std::string& source) {
  const catalog::InstanceGpus* fam = catalog::find_instance_gpus(to_string(provider), p.instance);
  if (!fam) return;
  Candidate& c = f.candidates[{p.region, p.instance}];
  c.family = fam;
  c.region = p.region;
  c.source = source;
  if (p.spot) {
    c.spot_seen = true;
    c.spot = p.nanos;
    c.spot_text = p.text;
  } else {
    c.ondemand_seen = true;
    c.ondemand = p.nanos;
    c.ondemand_text = p.text;
  }
}

// ---- Azure Retail Prices API ----------------------------------------------------------------------

Result<void> fetch_azure(HttpGetter& http, const std::string& base, const std::vector<std::string>& regions,
                         ProviderFetch& out, ProviderOutcome& report) {
  for (const auto& region : regions) {
    const std::string filter = fmt::format(
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and armRegionName eq '{}'", region);
    std::string url = base + "/api/retail/prices?$filter=" + url_encode(filter);
    const std::string source =
        fmt::format("azure-retail-prices:{}/api/retail/prices (armRegionName eq '{}')", base, region);
    std::set<std::string> seen;
    for (int page = 0;; ++page) {
      if (page >= kMaxPages || !seen.insert(url).second)
        return make_error(
            ErrorKind::unavailable,
            fmt::format("azure: {}: NextPageLink goes round in circles or past {} pages", url, kMaxPages));
      report.requests.push_back(url);
      GM_TRY(auto body, get_page(http, url, {}));
      GM_TRY(auto parsed, detail::read_azure_page(body, "azure: " + url));
      report.rows_read += parsed.items;
      report.rows_filtered += parsed.filtered;
      for (const auto& p : parsed.prices) {
        if (p.region != region) {
          ++report.rows_filtered;
          continue;
        }
        if (!catalog::find_instance_gpus("azure", p.instance)) {
          // N-series sizes are the GPU ones; others (D, E, F...) are not GPU offers at all.
          if (starts_with(p.instance, "Standard_N")) out.unknown.insert(region + " " + p.instance);
          continue;
        }
        note_price(out, p, Provider::azure, source);
      }
      if (!parsed.next_link) break;
      url = rebase(*parsed.next_link, base);
    }
  }
  return ok_result();
}

// ---- AWS Price List bulk CSV ----------------------------------------------------------------------

Result<void> fetch_aws(HttpGetter& http, const std::string& base, const std::vector<std::string>& regions,
                       ProviderFetch& out, ProviderOutcome& report) {
  for (const auto& region : regions) {
    const std::string url = fmt::format("{}/offers/v1.0/aws/AmazonEC2/current/{}/index.csv", base, region);
    report.requests.push_back(url);
    detail::AwsCsvReader reader("aws: " + url, region);
    Error feed_error;
    bool feed_failed = false;
    auto got = http.get(url, {}, [&](std::string_view piece) {
      if (auto r = reader.feed(piece); !r) {
        feed_error = r.error();
        feed_failed = true;
        return false;
      }
      return true;
    });
    if (feed_failed) return feed_error;
    if (!got) return got.error();
    GM_TRY_VOID(reader.finish());
    report.rows_read += reader.rows();
    report.rows_filtered += reader.filtered();
    const std::string source = fmt::format("aws-price-list:{}{}", url,
                                           reader.publication_date().empty()
                                               ? std::string()
                                               : " (Publication Date " + reader.publication_date() + ")");
    std::set<std::string> kept;
    for (const auto& p : reader.prices()) {
      kept.insert(p.instance);
      if (catalog::find_instance_gpus("aws", p.instance)) note_price(out, p, Provider::aws, source);
    }
    for (const auto& instance : reader.gpu_instances())
      if (!catalog::find_instance_gpus("aws", instance) && kept.count(instance))
        out.unknown.insert(region + " " + instance);
  }
  return ok_result();
}

// ---- GCP Cloud Billing Catalog --------------------------------------------------------------------

bool region_of(const detail::GcpSku& s, const std::string& region) {
  return std::find(s.regions.begin(), s.regions.end(), region) != s.regions.end();
}

Result<void> fetch_gcp(HttpGetter& http, const std::string& base, const std::string& key,
                       const std::vector<std::string>& regions, ProviderFetch& out, ProviderOutcome& report) {
  std::vector<detail::GcpSku> skus;
  std::string token;
  std::set<std::string> tokens;
  const std::string first =
      fmt::format("{}/v1/services/{}/skus?currencyCode=USD&pageSize=5000", base, kGcpComputeService);
  for (int page = 0;; ++page) {
    if (page >= kMaxPages)
      return make_error(ErrorKind::unavailable, fmt::format("gcp: {}: more than {} pages", first, kMaxPages));
    const std::string shown = first + (token.empty() ? "" : "&pageToken=" + url_encode(token));
    report.requests.push_back(shown);
    GM_TRY(auto body, get_page(http, shown + "&key=" + url_encode(key), {}));
    GM_TRY(auto parsed, detail::read_gcp_page(body, "gcp: " + shown));
    report.rows_read += parsed.skus.size();
    for (auto& s : parsed.skus) {
      const bool relevant = s.resource_group == "GPU" ||
                            s.description.find(" Instance Core") != std::string::npos ||
                            s.description.find(" Instance Ram") != std::string::npos;
      if (!relevant || (s.usage_type != "OnDemand" && s.usage_type != "Preemptible")) {
        ++report.rows_filtered;
        continue;
      }
      skus.push_back(std::move(s));
    }
    if (parsed.next_page_token.empty()) break;
    if (!tokens.insert(parsed.next_page_token).second)
      return make_error(ErrorKind::unavailable, fmt::format("gcp: {}: nextPageToken repeats", shown));
    token = parsed.next_page_token;
  }
  const std::string source =
      fmt::format("gcp-cloud-billing-catalog:{}/v1/services/{}/skus (GPU + host core + RAM SKUs)", base,
                  kGcpComputeService);
  // A machine type's price: its GPUs' SKU x count + its family's core SKU x vCPUs + RAM SKU x GiB.
  auto find = [&](const std::string& region, const std::string& usage,
                  auto&& match) -> const detail::GcpSku* {
    for (const auto& s : skus)
      if (s.usage_type == usage && region_of(s, region) && match(s)) return &s;
    return nullptr;
  };
  std::set<std::string> known_gpu_skus;
  for (const auto& fam : catalog::instance_gpus_table())
    if (fam.provider == "gcp" && !fam.gpu_sku.empty()) known_gpu_skus.insert(fam.gpu_sku);
  for (const auto& region : regions) {
    for (const auto& fam : catalog::instance_gpus_table()) {
      if (fam.provider != "gcp" || fam.gpu_sku.empty() || fam.host_family.empty()) continue;
      for (const bool spot : {false, true}) {
        const std::string usage = spot ? "Preemptible" : "OnDemand";
        const auto* gpu = find(region, usage, [&](const detail::GcpSku& s) {
          return s.resource_group == "GPU" && starts_with(s.description, fam.gpu_sku + " ");
        });
        const auto* core = find(region, usage, [&](const detail::GcpSku& s) {
          return s.description.find(fam.host_family + " Instance Core") != std::string::npos &&
                 s.usage_unit == "h";
        });
        const auto* ram = find(region, usage, [&](const detail::GcpSku& s) {
          return s.description.find(fam.host_family + " Instance Ram") != std::string::npos &&
                 s.usage_unit == "GiBy.h";
        });
        if (!gpu || !core || !ram || !fam.vcpus || !fam.memory_gib) continue;
        Candidate& c = out.candidates[{region, fam.instance}];
        c.family = &fam;
        c.region = region;
        c.source = source;
        std::optional<util::NanoUsd> total;
        std::string text = fmt::format("{} x {} + {} x {} + {} x {}", fam.gpu_count, gpu->text, *fam.vcpus,
                                       core->text, *fam.memory_gib, ram->text);
        if (gpu->nanos && core->nanos && ram->nanos) {
          // Any non-positive part makes the sum meaningless: refuse it as a whole.
          if (*gpu->nanos > 0 && *core->nanos > 0 && *ram->nanos > 0)
            total = meter::priced_sum_nanos(
                {{*gpu->nanos, fam.gpu_count}, {*core->nanos, *fam.vcpus}, {*ram->nanos, *fam.memory_gib}});
          else
            total = 0;
        }
        (spot ? c.spot : c.ondemand) = total;
        (spot ? c.spot_text : c.ondemand_text) = text;
        (spot ? c.spot_seen : c.ondemand_seen) = true;
      }
    }
    for (const auto& s : skus) {
      if (s.resource_group != "GPU" || s.usage_type != "OnDemand" || !region_of(s, region)) continue;
      bool known = false;
      for (const auto& k : known_gpu_skus) known = known || starts_with(s.description, k + " ");
      if (!known) {
        const auto cut = s.description.find(" running in");
        out.unknown.insert(region + " " + s.description.substr(0, cut));
      }
    }
  }
  return ok_result();
}

// ---- Lambda ---------------------------------------------------------------------------------------

Result<void> fetch_lambda(HttpGetter& http, const std::string& base, const std::string& key,
                          const std::vector<std::string>& regions, ProviderFetch& out,
                          ProviderOutcome& report) {
  const std::string url = base + "/api/v1/instance-types";
  report.requests.push_back(url);
  GM_TRY(auto body, get_page(http, url, {{"Authorization", "Bearer " + key}}));
  GM_TRY(auto types, detail::read_lambda_types(body, "lambda: " + url));
  report.rows_read += types.size();
  const std::string source = fmt::format("lambda-api:{} (one price for every region)", url);
  for (const auto& t : types) {
    if (!catalog::find_instance_gpus("lambda", t.name)) {
      out.unknown.insert("* " + t.name);
      continue;
    }
    for (const auto& region : regions) {
      detail::RawPrice p{t.name, region, false, t.nanos, t.text};
      note_price(out, p, Provider::lambda, source);
    }
  }
  return ok_result();
}

std::string price_text(util::NanoUsd n) {
  return util::format_nanos(n);
}

// More than 50 % away from the previous price, in integers: |new - old| * 2 > old.
bool big_change(std::optional<util::NanoUsd> before, std::optional<util::NanoUsd> after) {
  if (!before || !after || *before <= 0) return false;
  return meter::moved_over_half(*before, *after);
}

std::string change_text(const char* what, std::optional<util::NanoUsd> before,
                        std::optional<util::NanoUsd> after) {
  if (!before || !after || *before == *after) return {};
  const std::int64_t per_mille = meter::change_per_mille(*before, *after);
  return fmt::format("{} {} -> {} ({:+}.{}%)", what, price_text(*before), price_text(*after),
                     static_cast<long long>(per_mille / 10),
                     static_cast<long long>((per_mille < 0 ? -per_mille : per_mille) % 10));
}

std::vector<std::string> catalog_regions(const catalog::Catalog& catalog, Provider p) {
  std::set<std::string> out;
  for (const auto& o : catalog.offers())
    if (o.provider == to_string(p)) out.insert(o.region);
  return {out.begin(), out.end()};
}

}  // namespace

constexpr util::EnumText<Provider> kProviders[] = {
    {Provider::azure, "azure"}, {Provider::aws, "aws"}, {Provider::gcp, "gcp"}, {Provider::lambda, "lambda"}};

const char* to_string(Provider p) {
  return util::enum_text(kProviders, p, "?");
}

std::optional<Provider> provider_from(std::string_view name) {
  return util::enum_from_text(kProviders, util::to_lower(name));
}

constexpr util::EnumText<Provider> kEndpoints[] = {{Provider::azure, "https://prices.azure.com"},
                                                   {Provider::aws, "https://pricing.us-east-1.amazonaws.com"},
                                                   {Provider::gcp, "https://cloudbilling.googleapis.com"},
                                                   {Provider::lambda, "https://cloud.lambda.ai"}};

std::string default_endpoint(Provider p) {
  return util::enum_text(kEndpoints, p);
}

constexpr util::EnumText<Verdict> kVerdicts[] = {
    {Verdict::added, "added"},     {Verdict::updated, "updated"},     {Verdict::unchanged, "unchanged"},
    {Verdict::flagged, "flagged"}, {Verdict::held_back, "held_back"}, {Verdict::refused, "refused"}};

const char* to_string(Verdict v) {
  return util::enum_text(kVerdicts, v, "?");
}

Result<UpdateResult> fetch_update(const UpdateOptions& options, HttpGetter& http,
                                  const catalog::Catalog& current,
                                  const std::vector<catalog::Offer>& previous_fetched) {
  UpdateResult result;
  result.fetched_at = util::iso8601_utc(options.now_unix_ms);
  const std::string today = result.fetched_at.substr(0, 10);
  const bool named = !options.providers.empty();
  std::vector<Provider> providers = options.providers;
  if (!named) providers = {Provider::azure, Provider::aws, Provider::gcp, Provider::lambda};

  std::vector<catalog::Offer> merged = previous_fetched;
  for (const Provider provider : providers) {
    ProviderOutcome report;
    report.provider = provider;
    const std::string name = to_string(provider);
    const std::string base = trim_slash(options.endpoint.value_or(default_endpoint(provider)));
    const std::string& key = provider == Provider::gcp ? options.gcp_api_key : options.lambda_api_key;
    if ((provider == Provider::gcp || provider == Provider::lambda) && key.empty()) {
      const char* var = provider == Provider::gcp ? "GPUMETER_GCP_API_KEY" : "LAMBDA_API_KEY";
      if (named)
        return make_error(ErrorKind::usage,
                          fmt::format("--provider {}: its price API needs a key in ${}", name, var));
      report.skipped = fmt::format("no key in ${}", var);
      result.providers.push_back(std::move(report));
      continue;
    }
    std::vector<std::string> regions = options.regions;
    if (regions.empty()) regions = catalog_regions(current, provider);
    ProviderFetch fetched;
    Result<void> got = ok_result();
    switch (provider) {
      case Provider::azure:
        got = fetch_azure(http, base, regions, fetched, report);
        break;
      case Provider::aws:
        got = fetch_aws(http, base, regions, fetched, report);
        break;
      case Provider::gcp:
        got = fetch_gcp(http, base, key, regions, fetched, report);
        break;
      case Provider::lambda:
        got = fetch_lambda(http, base, key, regions, fetched, report);
        break;
    }
    if (!got) {
      Error e = got.error();
      if (!starts_with(e.message, name + ":")) e.message = name + ": " + e.message;
      if (e.kind == ErrorKind::failure) e.kind = ErrorKind::unavailable;
      return e;
    }
    for (const auto& u : fetched.unknown) result.unknown_instances.push_back(name + " " + u);

    for (auto& [key_pair, c] : fetched.candidates) {
      const auto& [region, instance] = key_pair;
      OfferOutcome out;
      out.provider = name;
      out.region = region;
      out.instance = instance;
      const catalog::Offer* before = current.find_offer(name, instance, region);
      if (before && before->region != region) before = nullptr;
      const auto old_od = before ? nanos_of(before->ondemand_usd_per_hour) : std::nullopt;
      const auto old_spot = before ? nanos_of(before->spot_usd_per_hour) : std::nullopt;
      out.old_ondemand_usd_per_hour = before ? before->ondemand_usd_per_hour : std::nullopt;
      out.old_spot_usd_per_hour = before ? before->spot_usd_per_hour : std::nullopt;
      std::vector<std::string> notes;
      // Rule 1: a price must be a positive number.
      if (!c.ondemand_seen) {
        out.verdict = Verdict::refused;
        out.detail = "no on-demand Linux price in the answer (spot alone is not an offer)";
        result.offers.push_back(std::move(out));
        continue;
      }
      if (!c.ondemand || *c.ondemand <= 0) {
        out.verdict = Verdict::refused;
        out.detail = fmt::format("on-demand price '{}' refused: {}", c.ondemand_text,
                                 !c.ondemand        ? "not a number"
                                 : *c.ondemand == 0 ? "$0"
                                                    : "negative");
        result.offers.push_back(std::move(out));
        continue;
      }
      if (c.spot_seen && (!c.spot || *c.spot <= 0)) {
        notes.push_back(fmt::format("spot price '{}' refused ({})", c.spot_text,
                                    !c.spot        ? "not a number"
                                    : *c.spot == 0 ? "$0"
                                                   : "negative"));
        c.spot.reset();
        c.spot_seen = false;
      }
      // AWS publishes no spot price list: the catalog's spot price stays, marked as such.
      std::string spot_note;
      if (provider == Provider::aws && !c.spot_seen && old_spot) {
        c.spot = old_spot;
        c.spot_from_catalog = true;
        // A row that already carried its spot price over names the original source, not a chain of fetches.
        const auto kept = before->source.find("; spot kept from ");
        spot_note = kept != std::string::npos
                        ? before->source.substr(kept)
                        : fmt::format("; spot kept from {} ({})", before->source, before->date);
      }
      out.new_ondemand_usd_per_hour = util::nanos_to_usd(*c.ondemand);
      if (c.spot) out.new_spot_usd_per_hour = util::nanos_to_usd(*c.spot);
      // Rule 2: more than 50 % away from the previous price is held back.
      const bool moved =
          big_change(old_od, c.ondemand) || (!c.spot_from_catalog && big_change(old_spot, c.spot));
      if (moved && !options.accept_changes) {
        out.verdict = Verdict::held_back;
        std::string what = change_text("on-demand", old_od, c.ondemand);
        if (!c.spot_from_catalog && big_change(old_spot, c.spot))
          what += (what.empty() ? "" : ", ") + change_text("spot", old_spot, c.spot);
        out.detail =
            fmt::format("{}: more than 50 % since {}; the previous price stays (--accept-changes to use it)",
                        what, before->date.empty() ? "the previous fetch" : before->date);
        result.offers.push_back(std::move(out));
        continue;
      }
      // Rule 3: spot above on-demand is used but flagged.
      const bool spot_above = c.spot && *c.spot > *c.ondemand;
      if (spot_above)
        notes.push_back(
            fmt::format("spot {} above on-demand {}", price_text(*c.spot), price_text(*c.ondemand)));

      catalog::Offer o;
      o.provider = name;
      o.region = region;
      o.instance = instance;
      o.gpu = c.family->gpu;
      if (const catalog::GpuSpec* g = current.find_gpu(o.gpu)) o.gpu = g->id;
      o.gpu_count = c.family->gpu_count;
      o.vcpus = c.family->vcpus;
      o.memory_gib = c.family->memory_gib;
      o.ondemand_usd_per_hour = util::nanos_to_usd(*c.ondemand);
      if (c.spot) o.spot_usd_per_hour = util::nanos_to_usd(*c.spot);
      o.source = c.source + spot_note;
      o.date = today;
      o.fetched_at = result.fetched_at;

      if (!before) {
        out.verdict = Verdict::added;
      } else if (old_od == c.ondemand && (c.spot_from_catalog || old_spot == c.spot)) {
        out.verdict = Verdict::unchanged;
      } else {
        out.verdict = Verdict::updated;
        std::string what = change_text("on-demand", old_od, c.ondemand);
        if (!c.spot_from_catalog) {
          const std::string s = change_text("spot", old_spot, c.spot);
          if (!s.empty()) what += (what.empty() ? "" : ", ") + s;
        }
        if (!what.empty()) notes.insert(notes.begin(), what);
      }
      if (spot_above) out.verdict = Verdict::flagged;
      if (c.spot_from_catalog) notes.push_back("spot kept from the catalog (no public AWS spot price list)");
      std::string joined;
      for (const auto& n : notes) joined += (joined.empty() ? "" : "; ") + n;
      out.detail = joined;
      result.offers.push_back(std::move(out));

      auto same = std::find_if(merged.begin(), merged.end(), [&](const catalog::Offer& m) {
        return m.provider == o.provider && m.region == o.region && m.instance == o.instance;
      });
      if (same != merged.end())
        *same = std::move(o);
      else
        merged.push_back(std::move(o));
    }
    result.providers.push_back(std::move(report));
  }
  // Keep rows of a fetched catalog in a stable order: provider, region, instance.
  std::stable_sort(merged.begin(), merged.end(), [](const catalog::Offer& a, const catalog::Offer& b) {
    return std::tie(a.provider, a.region, a.instance) < std::tie(b.provider, b.region, b.instance);
  });
  result.fetched_catalog = std::move(merged);
  return result;
}

}  // namespace gm::prices
