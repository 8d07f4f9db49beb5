#pragma once
// The price catalog: GPU specs, cloud offers (on-demand and spot per region), billing rules, grid carbon
// intensity and PUE. Built-in data comes from data/*.csv compiled into the binary; a user override file
// with the same columns is merged on top. Every price carries its source and date.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gm::catalog {

/// The highest price per GPU-hour gpumeter accepts from any input (flags, config, catalog files): far above
/// any real offer, and low enough that a year of micro-dollar sums cannot overflow.
inline constexpr double kMaxUsdPerGpuHour = 1'000'000;

/// Datasheet figures of one GPU model. Dense tensor figures are used for time estimates.
struct GpuSpec {
  std::string id;                  ///< catalog name, e.g. "H100 SXM 80GB", "A100 SXM 40GB", "L4 24GB"
  std::string family;              ///< "H100", "A100", "L4"...
  std::string architecture;        ///< "Hopper"
  double memory_gb = 0;            ///< decimal GB as on the datasheet
  std::uint64_t memory_bytes = 0;  ///< usable bytes (GiB-based for HBM sizes reported by NVML)
  std::optional<double> mem_bw_gbps;
  std::optional<double> fp32_tflops;
  std::optional<double> tf32_dense_tflops;
  std::optional<double> bf16_dense_tflops;
  std::optional<double> fp16_dense_tflops;
  std::optional<double> fp8_dense_tflops;
  std::optional<double> int8_dense_tops;
  std::optional<double> tdp_w;
  std::string interconnect;
  std::optional<double> interconnect_gbps;
  std::string source;
};

/// An instance offer: price of a whole instance with `gpu_count` GPUs.
struct Offer {
  std::string provider;  ///< "aws", "gcp", "azure", "lambda", or a user's name
  std::string region;
  std::string instance;  ///< "p5.48xlarge"
  std::string gpu;       ///< GpuSpec::id
  double gpu_count = 0;  ///< may be fractional (0.25 of an L4)
  std::optional<double> vcpus;
  std::optional<double> memory_gib;
  std::optional<double> ondemand_usd_per_hour;  ///< whole instance
  std::optional<double> spot_usd_per_hour;      ///< whole instance
  std::string source;                           ///< where the price was read
  std::string date;                             ///< when (YYYY-MM-DD)
  std::string fetched_at;          ///< when `prices update` fetched it (ISO 8601 UTC); "" for built-in rows
  std::vector<std::string> flags;  ///< sanity-check flags ("spot_above_ondemand", ...)
  bool user_override = false;      ///< came from the user's override file

  /// On-demand (or spot) $/GPU-hour, if the price is known.
  std::optional<double> usd_per_gpu_hour(bool spot = false) const;
};

/// What an instance type holds, from the provider's documented instance family (data/instance_gpus.csv).
struct InstanceGpus {
  std::string provider;
  std::string instance;  ///< "Standard_ND96isr_H100_v5"
  std::string gpu;       ///< GpuSpec::id (or a name the specs do not have yet)
  double gpu_count = 0;
  std::optional<double> vcpus;
  std::optional<double> memory_gib;
  std::string host_family;  ///< GCP: machine family whose core and RAM SKUs price the host ("A3")
  std::string gpu_sku;      ///< GCP: the GPU SKU's description before " running in" ("Nvidia H100 80GB GPU")
  std::string source;       ///< the provider's page that documents it
};

/// The built-in instance family table (data/instance_gpus.csv).
const std::vector<InstanceGpus>& instance_gpus_table();
/// The documented GPUs of `instance` at `provider`; nullptr when the table does not know it.
const InstanceGpus* find_instance_gpus(std::string_view provider, std::string_view instance);

/// How a provider bills: billed_s = max(ceil(wall_s / granularity_s) * granularity_s, minimum_s).
struct BillingRule {
  std::string provider;
  std::int64_t granularity_s = 1;
  std::int64_t minimum_s = 0;
  std::optional<std::int64_t> spot_notice_s;  ///< interruption notice
  std::string source;
};

/// Grid carbon intensity of a region from one dataset.
struct CarbonIntensity {
  std::string dataset;  ///< "codecarbon", "ccf"
  std::string provider;
  std::string region;
  std::string location;
  double g_co2e_per_kwh = 0;
  std::string source;  ///< dataset file and commit
};

/// Data-centre power usage effectiveness.
struct Pue {
  std::string provider;
  std::string region;  ///< "*" for the provider average
  double pue = 1.0;
  std::string source;
};

/// A reference price for a GPU model when no offer is known: the median on-demand $/GPU-h over the catalog.
struct ReferencePrice {
  double usd_per_gpu_hour = 0;
  std::size_t offers = 0;  ///< how many offers the median is over
  std::string gpu;         ///< GpuSpec::id
};

/// The whole catalog. Cheap to copy pointers into; build once per process.
class Catalog {
 public:
  /// The catalog compiled into the binary (data/*.csv).
  static Result<Catalog> builtin();
  /// Loads catalog CSVs from text (tests); names are used in error messages.
  static Result<Catalog> from_csv(std::string_view gpus_csv, std::string_view offers_csv,
                                  std::string_view billing_csv, std::string_view carbon_csv,
                                  std::string_view pue_csv);
  /// Merges a user override file of offers (same columns as data/offers.csv) on top: rows with the
  /// same provider+region+instance replace the built-in row, others are added. Errors name file:line.
  Result<void> merge_offers_file(const std::string& path);

  const std::vector<GpuSpec>& gpus() const { return gpus_; }
  const std::vector<Offer>& offers() const { return offers_; }
  const std::vector<BillingRule>& billing_rules() const { return billing_; }
  const std::vector<CarbonIntensity>& carbon() const { return carbon_; }
  const std::vector<Pue>& pue() const { return pue_; }

  /// GPU by catalog id or a loose user spelling ("h100", "H100-SXM", "a100-80gb"); nullptr if unknown.
  const GpuSpec* find_gpu(std::string_view name) const;
  /// Maps a device name as the vendor's library reports it ("NVIDIA H100 80GB HBM3") to a catalog GPU through
  /// the per-vendor table (data/device_names.csv); `vendor` "" searches every vendor; nullptr if unknown.
  const GpuSpec* gpu_for_device_name(std::string_view device_name, std::string_view vendor = {}) const;
  /// Close catalog GPU names for an unknown one (for "did you mean").
  std::string suggest_gpu(std::string_view name) const;
  /// Offer by "provider:instance" (region optional: "provider:instance@region"); cheapest region if none.
  const Offer* find_offer(std::string_view provider, std::string_view instance,
                          std::optional<std::string_view> region = std::nullopt) const;
  /// Offer by instance type alone (as read from DMI), cheapest region.
  const Offer* find_offer_by_instance(std::string_view instance) const;
  /// Median on-demand $/GPU-h of this GPU across unflagged offers.
  std::optional<ReferencePrice> reference_price(std::string_view gpu_id) const;
  /// Billing rule of a provider; a per-second rule with no minimum for unknown providers.
  BillingRule billing_rule(std::string_view provider) const;
  /// Carbon intensity for provider+region from `dataset` (empty = preferred dataset); nullptr if none.
  const CarbonIntensity* carbon_for(std::string_view provider, std::string_view region,
                                    std::string_view dataset = {}) const;
  /// PUE for provider+region, falling back to the provider average; nullopt if none.
  std::optional<Pue> pue_for(std::string_view provider, std::string_view region) const;
  /// Date of the newest price in the catalog (YYYY-MM-DD), for `doctor`'s "catalog age"; `provider` "" = all.
  std::string newest_price_date(std::string_view provider = {}) const;

 private:
  std::vector<GpuSpec> gpus_;
  std::vector<Offer> offers_;
  std::vector<BillingRule> billing_;
  std::vector<CarbonIntensity> carbon_;
  std::vector<Pue> pue_;
  friend class CatalogLoader;
};

/// Runs the sanity checks on every offer and fills Offer::flags (spot above on-demand, GPU count not
/// matching the instance family, zero or missing prices, GCP GPU-only rows without their host VM price...).
void flag_offers(std::vector<Offer>& offers, const std::vector<GpuSpec>& gpus);

/// Offers as CSV with the columns of data/offers.csv plus `fetched_at` (what `prices update` writes).
std::string offers_to_csv(const std::vector<Offer>& offers);

/// Reads an offers CSV file (data/offers.csv columns) without merging it; errors name file:line.
Result<std::vector<Offer>> read_offers_file(const std::string& path);

/// Where `prices update` writes the fetched catalog: $GPUMETER_DATA_DIR/offers.csv, else
/// $XDG_DATA_HOME/gpumeter/offers.csv, else /var/lib/gpumeter/offers.csv for root, else
/// ~/.local/share/gpumeter/offers.csv.
std::string user_catalog_path();
/// The fetched catalog commands read: user_catalog_path() when it exists, else the system one
/// (/var/lib/gpumeter/offers.csv, written by the packaged timer) when it exists.
std::optional<std::string> existing_user_catalog_path();

/// The built-in catalog, the fetched catalog (existing_user_catalog_path()) over it, offer by offer, and the
/// --catalog override file (when given) on top.
Result<Catalog> load_catalog(const std::optional<std::string>& catalog_override);

/// What `prices` lists: a GPU family, model or offer GPU with an optional ":N" count, a provider, a region.
struct OfferQuery {
  std::string gpu;           ///< "H100", "H100:8"; empty: every GPU
  std::string provider;      ///< case-insensitive; empty: every provider
  std::string region;        ///< empty: every region
  bool spot = false;         ///< only offers with a spot price, ordered by it
  bool all_regions = false;  ///< one row per region (else each instance at its cheapest region)
};
/// The offers `query` selects, cheapest first by $/GPU-hour (ties by provider, instance, region). Errors: a
/// bad count (usage), an unknown GPU or provider (not_found, with the closest GPU name or the known
/// providers).
Result<std::vector<const Offer*>> select_offers(const Catalog& catalog, const OfferQuery& query);

}  // namespace gm::catalog
