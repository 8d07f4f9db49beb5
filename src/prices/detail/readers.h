#pragma once
// Internals of prices/: the readers of each provider's price format (also driven by the unit tests and the
// fuzz targets). Readers never fetch; they turn bytes into typed rows or an error naming the source.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "util/money.h"
#include "util/result.h"

namespace gm::prices::detail {

/// Nano-dollars (1e-9 USD): exact for every price the providers publish (GCP's nanos, AWS's 10 decimals).
using gm::util::NanoUsd;

/// A decimal price text ("3.673", "55.0400000000", "-1", "0") as nano-dollars, exactly (digits past the ninth
/// decimal are rounded half up); nullopt for anything else ("", "abc", "1e3", "NaN", overflow).
std::optional<util::NanoUsd> parse_decimal_nanos(std::string_view text);

/// One price as read: the instance, region, spot or not, and the price (nullopt when the text was not a
/// number).
struct RawPrice {
  std::string instance;
  std::string region;
  bool spot = false;
  std::optional<util::NanoUsd> nanos;
  std::string text;  ///< the price as written, for messages
};

/// One page of the Azure Retail Prices API.
struct AzurePage {
  std::vector<RawPrice> prices;  ///< Linux, type Consumption, per hour, USD; spot when skuName ends " Spot"
  std::optional<std::string> next_link;  ///< NextPageLink (absent or null on the last page)
  std::size_t items = 0;
  std::size_t filtered =
      0;  ///< Windows, Low Priority, DevTestConsumption, Reservation, other units or currencies
};
/// Reads an Azure page; error (naming `origin`) for malformed or truncated JSON or a page without Items.
Result<AzurePage> read_azure_page(std::string_view json, std::string_view origin);

/// Reads the AWS Price List bulk CSV of one region as it arrives: preamble rows (FormatVersion, Disclaimer,
/// Publication Date, Version, OfferCode), the header (first field "SKU"), then rows. Keeps on-demand Linux
/// rows (TermType OnDemand, Operating System Linux, Tenancy Shared, CapacityStatus Used, Pre Installed S/W
/// NA, Unit Hrs, USD) and notes the GPU instance types it saw.
class AwsCsvReader {
 public:
  AwsCsvReader(std::string origin, std::string region);
  /// Feeds the next bytes; error for a row of the wrong width or a missing column.
  Result<void> feed(std::string_view bytes);
  /// Ends the input; error when it stops inside a quoted field or a row (a truncated file) or had no header.
  Result<void> finish();
  const std::vector<RawPrice>& prices() const { return prices_; }
  /// Instance types whose rows say they have GPUs (column GPU > 0), kept or not.
  const std::set<std::string>& gpu_instances() const { return gpu_instances_; }
  const std::string& publication_date() const { return publication_date_; }
  std::size_t rows() const { return rows_; }
  std::size_t filtered() const { return filtered_; }

 private:
  Result<void> end_record();
  Result<void> row(std::vector<std::string>& fields);
  std::string origin_, region_;
  std::vector<std::string> header_;
  int col_instance_ = -1, col_term_ = -1, col_os_ = -1, col_tenancy_ = -1, col_capacity_ = -1, col_sw_ = -1,
      col_unit_ = -1, col_price_ = -1, col_currency_ = -1, col_gpu_ = -1, col_region_ = -1, col_family_ = -1,
      col_market_ = -1;
  std::vector<std::string> fields_;
  std::string field_;
  bool in_quotes_ = false, quote_pending_ = false, field_started_ = false;
  std::size_t line_ = 1, record_line_ = 1;
  std::vector<RawPrice> prices_;
  std::set<std::string> gpu_instances_;
  std::string publication_date_;
  std::size_t rows_ = 0, filtered_ = 0;
};

/// One SKU of the GCP Cloud Billing Catalog.
struct GcpSku {
  std::string description;     ///< "Nvidia H100 80GB GPU running in Americas"
  std::string resource_group;  ///< "GPU", "CPU", "RAM", ...
  std::string usage_type;      ///< "OnDemand", "Preemptible", "Commit1Yr", ...
  std::vector<std::string> regions;
  std::string usage_unit;        ///< "h", "GiBy.h"
  std::optional<util::NanoUsd> nanos;  ///< units + nanos of the first tier
  std::string text;
};
/// One page of `services/6F81-5844-456A/skus`.
struct GcpPage {
  std::vector<GcpSku> skus;
  std::string next_page_token;
};
/// Reads a GCP page; error (naming `origin`) for malformed or truncated JSON or a page without skus.
Result<GcpPage> read_gcp_page(std::string_view json, std::string_view origin);

/// One entry of Lambda's /api/v1/instance-types.
struct LambdaType {
  std::string name;
  std::string gpu_description;
  std::optional<util::NanoUsd> nanos;  ///< price_cents_per_hour as nano-dollars
  std::string text;
};
/// Reads Lambda's answer; error (naming `origin`) for malformed JSON or no `data` object.
Result<std::vector<LambdaType>> read_lambda_types(std::string_view json, std::string_view origin);

}  // namespace gm::prices::detail
