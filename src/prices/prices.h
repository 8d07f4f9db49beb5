#pragma once
// Fresh prices: fetchers for the providers' public price lists (Azure Retail Prices API, AWS Price List bulk
// CSV, GCP Cloud Billing Catalog, Lambda's instance-types API) behind an HTTP-getter seam, the sanity rules
// every fetched offer passes before it is used, and the fetched catalog they produce (written atomically by
// the caller: see write_file_atomically). Money is read as exact decimals (integer nano-dollars); offers keep
// their $/h as the catalog holds them.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "util/http_client.h"
#include "util/result.h"

namespace gm::prices {

/// Receives a response body piece by piece; returns false to stop the transfer.
using BodySink = util::HttpBodySink;
/// Request headers (name, value).
using HttpHeaders = util::HttpFields;

/// Timeouts of the getter.
struct HttpTimeouts {
  int connect_ms = 10'000;
  int read_ms = 60'000;  ///< between two reads of the body, not for the whole body
};

/// GETs price lists over HTTP(S) through the client seam: server certificates verified, redirects followed.
class HttpGetter {
 public:
  explicit HttpGetter(util::HttpClient& http, HttpTimeouts timeouts = {})
      : http_(http), timeouts_(timeouts) {}
  /// GETs the absolute `url`, streaming the body to `sink`. Error (unavailable) when the server cannot be
  /// reached, times out, cuts the body short or answers with a status other than 200.
  Result<void> get(const std::string& url, const HttpHeaders& headers, const BodySink& sink);

 private:
  util::HttpClient& http_;
  HttpTimeouts timeouts_;
};

/// The getter over the process-wide real client (`http`, a fake in tests).
std::unique_ptr<HttpGetter> make_http_getter(HttpTimeouts timeouts = {},
                                             util::HttpClient& http = util::system_http());

/// The providers with a fetcher.
enum class Provider { azure, aws, gcp, lambda };
/// "azure", "aws", "gcp", "lambda".
const char* to_string(Provider p);
/// The provider named `name` (case-insensitive); nullopt if there is no fetcher for it.
std::optional<Provider> provider_from(std::string_view name);
/// The public base URL of a provider's price source ("https://prices.azure.com", ...).
std::string default_endpoint(Provider p);

/// What `prices update` was asked to do.
struct UpdateOptions {
  std::vector<Provider> providers;      ///< empty: every provider (GCP and Lambda only with their key)
  std::vector<std::string> regions;     ///< empty: the regions the catalog holds for each provider
  std::optional<std::string> endpoint;  ///< replaces every asked provider's base URL (a mirror, a stand-in)
  bool accept_changes = false;          ///< use prices that moved more than 50 % since the previous fetch
  std::string gcp_api_key;              ///< $GPUMETER_GCP_API_KEY
  std::string lambda_api_key;           ///< $LAMBDA_API_KEY
  std::int64_t now_unix_ms = 0;         ///< the fetch time written into every offer
};

/// What happened to one fetched offer.
enum class Verdict {
  added,      ///< new in the fetched catalog
  updated,    ///< price changed by at most 50 %
  unchanged,  ///< same price, newly dated
  flagged,    ///< used, but a sanity rule flagged it (spot above on-demand)
  held_back,  ///< moved more than 50 %: the previous price stays (unless --accept-changes)
  refused,    ///< $0, negative or non-numeric price: not used
};
/// "added", "updated", ...
const char* to_string(Verdict v);

/// One fetched offer and what the sanity rules made of it.
struct OfferOutcome {
  std::string provider;
  std::string region;
  std::string instance;
  Verdict verdict = Verdict::added;
  std::string detail;  ///< why (held back, refused, flagged) or what changed
  std::optional<double> old_ondemand_usd_per_hour, new_ondemand_usd_per_hour;
  std::optional<double> old_spot_usd_per_hour, new_spot_usd_per_hour;
};

/// One provider's fetch.
struct ProviderOutcome {
  Provider provider = Provider::azure;
  std::string skipped;  ///< why it was not fetched ("no key in $LAMBDA_API_KEY"); "" when fetched
  std::vector<std::string> requests;  ///< URLs fetched (keys removed)
  std::size_t rows_read = 0;          ///< price rows (items, CSV rows, SKUs, instance types) read
  std::size_t rows_filtered = 0;  ///< rows set aside: Windows, Low Priority, DevTest, Reserved, Dedicated...
};

/// The outcome of a whole update: reports and the new fetched catalog.
struct UpdateResult {
  std::vector<ProviderOutcome> providers;
  std::vector<OfferOutcome> offers;
  std::vector<std::string>
      unknown_instances;  ///< "azure eastus Standard_NC8ads_A10_v4": GPU types not in the family table
  std::vector<catalog::Offer> fetched_catalog;  ///< the previous fetched rows with this fetch merged in
  std::string fetched_at;              ///< ISO 8601 UTC
};

/// Fetches the asked providers' prices with `http`, checks each offer against the sanity rules and against
/// `current` (the catalog in use: built-in plus previous fetch) and merges them into `previous_fetched` (the
/// rows of the fetched catalog file). Writes nothing. Error when a fetch fails (unreachable, HTTP error,
/// truncated or malformed page) or a key is missing for a provider asked for by name.
Result<UpdateResult> fetch_update(const UpdateOptions& options, HttpGetter& http,
                                  const catalog::Catalog& current,
                                  const std::vector<catalog::Offer>& previous_fetched);

/// Writes `text` to `path` so that readers see the old file or the new one, never a mix: a temporary file in
/// the same directory (created with its parents), flushed to disk, then renamed over `path`.
Result<void> write_file_atomically(const std::string& path, std::string_view text);

}  // namespace gm::prices
