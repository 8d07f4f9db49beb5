// Readers of the providers' price formats: Azure Retail Prices pages, the AWS bulk CSV, GCP SKU pages and
// Lambda's instance types.
#include "prices/detail/readers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/json_in.h"
#include "util/units.h"

namespace gm::prices::detail {

namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::string str(const nlohmann::json& j, const char* key) {
  return util::json_string(j, key).value_or("");
}

// A JSON value that should be a price: numbers are read through their shortest decimal text (the text the
// provider wrote for any price with up to 17 significant digits), strings as decimal text.
void read_price(const nlohmann::json* v, std::optional<util::NanoUsd>& nanos, std::string& text) {
  if (v == nullptr || v->is_null()) {
    text = "(missing)";
    return;
  }
  if (v->is_number_integer() || v->is_number_unsigned()) {
    text = v->dump();
  } else if (v->is_number_float()) {
    const auto d = util::json_number(v);
    text = d ? fmt::format("{}", *d) : "NaN";
  } else if (auto s = util::json_string(v)) {
    text = std::move(*s);
  } else {
    text = v->dump();
    return;
  }
  nanos = parse_decimal_nanos(text);
}

/// `text` as JSON; a discarded value when it is not.
nlohmann::json parse_json(std::string_view text) {
  auto j = util::json_parse(text, "");
  return j ? std::move(*j) : nlohmann::json(nlohmann::json::value_t::discarded);
}

}  // namespace

std::optional<util::NanoUsd> parse_decimal_nanos(std::string_view text) {
  text = util::trim(text);
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  if (text.empty()) return std::nullopt;
  const std::size_t dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty() && frac.empty()) return std::nullopt;
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(whole) || !digits(frac)) return std::nullopt;
  constexpr util::NanoUsd kMax = std::numeric_limits<util::NanoUsd>::max() / 10;
  util::NanoUsd units = 0;
  for (char c : whole) {
    units = units * 10 + (c - '0');
    if (units > kMax / 100'000'000) return std::nullopt;  // more than ~$92 million: not a price
  }
  util::NanoUsd nanos = 0;
  for (std::size_t i = 0; i < 9; ++i) nanos = nanos * 10 + (i < frac.size() ? frac[i] - '0' : 0);
  if (frac.size() > 9 && frac[9] >= '5') ++nanos;
  const util::NanoUsd total = units * 1'000'000'000 + nanos;
  return negative ? -total : total;
}

// ---- Azure ----------------------------------------------------------------------------------------

Result<AzurePage> read_azure_page(std::string_view json, std::string_view origin) {
  const nlohmann::json j = parse_json(json);
  if (j.is_discarded())
    return make_error(
        ErrorKind::unavailable,
        fmt::format("{}: not a complete JSON page ({} bytes): truncated or malformed", origin, json.size()));
  const nlohmann::json* items = util::json_array(j, "Items");
  if (!items)
    return make_error(ErrorKind::unavailable,
                      fmt::format("{}: no Items array: not an Azure Retail Prices page", origin));
  AzurePage page;
  for (const auto& item : *items) {
    ++page.items;
    if (!item.is_object()) {
      ++page.filtered;
      continue;
    }
    const std::string type = str(item, "type");
    const std::string product = str(item, "productName");
    const std::string sku = str(item, "skuName");
    const std::string unit = str(item, "unitOfMeasure");
    const std::string currency = str(item, "currencyCode");
    const std::string service = str(item, "serviceName");
    // Linux pay-as-you-go only: Windows carries the licence, Low Priority is the retired batch tier (not
    // spot), DevTestConsumption and Reservation are other price types.
    if (type != "Consumption" || ends_with(product, " Windows") || ends_with(sku, " Low Priority") ||
        (!unit.empty() && unit != "1 Hour") || (!currency.empty() && currency != "USD") ||
        (!service.empty() && service != "Virtual Machines")) {
      ++page.filtered;
      continue;
    }
    RawPrice p;
    p.instance = str(item, "armSkuName");
    p.region = str(item, "armRegionName");
    p.spot = ends_with(sku, " Spot");
    if (p.instance.empty()) {
      ++page.filtered;
      continue;
    }
    read_price(util::json_member(item, "retailPrice"), p.nanos, p.text);
    page.prices.push_back(std::move(p));
  }
  if (auto next = util::json_string(j, "NextPageLink"); next && !next->empty())
    page.next_link = std::move(*next);
  return page;
}

// ---- AWS ------------------------------------------------------------------------------------------

AwsCsvReader::AwsCsvReader(std::string origin, std::string region)
    : origin_(std::move(origin)), region_(std::move(region)) {}

Result<void> AwsCsvReader::feed(std::string_view bytes) {
  for (const char c : bytes) {
    if (in_quotes_) {
      if (quote_pending_) {
        quote_pending_ = false;
        if (c == '"') {
          field_ += '"';
          continue;
        }
        in_quotes_ = false;  // the quote closed the field; fall through to handle c unquoted
      } else if (c == '"') {
        quote_pending_ = true;
        continue;
      } else {
        if (c == '\n') ++line_;
        field_ += c;
        continue;
      }
    }
    if (c == '"' && !field_started_) {
      in_quotes_ = true;
      field_started_ = true;
    } else if (c == ',') {
      fields_.push_back(std::move(field_));
      field_.clear();
      field_started_ = false;
    } else if (c == '\n') {
      GM_TRY_VOID(end_record());
      ++line_;
      record_line_ = line_;
    } else if (c != '\r') {
      field_ += c;
      field_started_ = true;
    }
    if (fields_.size() > 4096)
      return make_error(ErrorKind::unavailable,
                        fmt::format("{}:{}: more than 4096 fields in a row", origin_, record_line_));
    if (field_.size() > 1'000'000)
      return make_error(ErrorKind::unavailable,
                        fmt::format("{}:{}: a field over 1 MB", origin_, record_line_));
  }
  return ok_result();
}

Result<void> AwsCsvReader::end_record() {
  fields_.push_back(std::move(field_));
  field_.clear();
  field_started_ = false;
  std::vector<std::string> fields = std::move(fields_);
  fields_.clear();
  if (fields.size() == 1 && fields[0].empty()) return ok_result();  // blank line
  return row(fields);
}

Result<void> AwsCsvReader::finish() {
  if (in_quotes_ && !quote_pending_)
    return make_error(
        ErrorKind::unavailable,
        fmt::format("{}:{}: the file ends inside a quoted field: truncated", origin_, record_line_));
  if (quote_pending_) {
    in_quotes_ = false;
    quote_pending_ = false;
  }
  if (!fields_.empty() || field_started_ || !field_.empty()) {
    // A last row without its newline is whole only when it has every column.
    std::vector<std::string> fields = std::move(fields_);
    fields.push_back(std::move(field_));
    fields_.clear();
    field_.clear();
    if (header_.empty() || fields.size() != header_.size())
      return make_error(ErrorKind::unavailable,
                        fmt::format("{}:{}: the file ends inside a row: truncated", origin_, record_line_));
    GM_TRY_VOID(row(fields));
  }
  if (header_.empty())
    return make_error(
        ErrorKind::unavailable,
        fmt::format("{}: no header row (a row starting with \"SKU\"): not an AWS price list CSV", origin_));
  return ok_result();
}

Result<void> AwsCsvReader::row(std::vector<std::string>& fields) {
  if (header_.empty()) {
    if (fields[0] != "SKU") {
      if (fields[0] == "Publication Date" && fields.size() > 1) publication_date_ = fields[1];
      if (record_line_ > 20)
        return make_error(
            ErrorKind::unavailable,
            fmt::format("{}:{}: no header row (\"SKU\",...) in the first 20 rows", origin_, record_line_));
      return ok_result();
    }
    header_ = std::move(fields);
    auto col = [&](const char* name) {
      for (std::size_t i = 0; i < header_.size(); ++i)
        if (header_[i] == name) return static_cast<int>(i);
      return -1;
    };
    col_instance_ = col("Instance Type");
    col_term_ = col("TermType");
    col_os_ = col("Operating System");
    col_tenancy_ = col("Tenancy");
    col_capacity_ = col("CapacityStatus");
    col_sw_ = col("Pre Installed S/W");
    col_unit_ = col("Unit");
    col_price_ = col("PricePerUnit");
    col_currency_ = col("Currency");
    col_gpu_ = col("GPU");
    col_region_ = col("Region Code");
    col_family_ = col("Product Family");
    col_market_ = col("MarketOption");
    for (const auto& [name, index] : {std::pair{"Instance Type", col_instance_},
                                      {"TermType", col_term_},
                                      {"Operating System", col_os_},
                                      {"Tenancy", col_tenancy_},
                                      {"CapacityStatus", col_capacity_},
                                      {"Pre Installed S/W", col_sw_},
                                      {"PricePerUnit", col_price_}})
      if (index < 0)
        return make_error(ErrorKind::unavailable,
                          fmt::format("{}:{}: no column \"{}\"", origin_, record_line_, name));
    return ok_result();
  }
  if (fields.size() != header_.size())
    return make_error(ErrorKind::unavailable, fmt::format("{}:{}: {} fields where the header has {}", origin_,
                                                          record_line_, fields.size(), header_.size()));
  ++rows_;
  auto at = [&](int i) -> const std::string& {
    static const std::string none;
    return i < 0 ? none : fields[static_cast<std::size_t>(i)];
  };
  const std::string& instance = at(col_instance_);
  if (instance.empty()) {
    ++filtered_;
    return ok_result();
  }
  if (const auto gpus = util::parse_number(at(col_gpu_)); gpus && *gpus > 0) gpu_instances_.insert(instance);
  const bool keep = at(col_term_) == "OnDemand" && at(col_os_) == "Linux" && at(col_tenancy_) == "Shared" &&
                    at(col_capacity_) == "Used" && at(col_sw_) == "NA" &&
                    (col_unit_ < 0 || at(col_unit_) == "Hrs") &&
                    (col_market_ < 0 || at(col_market_).empty() || at(col_market_) == "OnDemand") &&
                    (col_currency_ < 0 || at(col_currency_) == "USD") &&
                    (col_region_ < 0 || at(col_region_).empty() || at(col_region_) == region_) &&
                    (col_family_ < 0 || at(col_family_) == "Compute Instance" ||
                     at(col_family_) == "Compute Instance (bare metal)");
  if (!keep) {
    ++filtered_;
    return ok_result();
  }
  RawPrice p;
  p.instance = instance;
  p.region = region_;
  p.text = at(col_price_);
  p.nanos = parse_decimal_nanos(p.text);
  prices_.push_back(std::move(p));
  return ok_result();
}

// ---- GCP ------------------------------------------------------------------------------------------

Result<GcpPage> read_gcp_page(std::string_view json, std::string_view origin) {
  const nlohmann::json j = parse_json(json);
  if (j.is_discarded())
    return make_error(
        ErrorKind::unavailable,
        fmt::format("{}: not a complete JSON page ({} bytes): truncated or malformed", origin, json.size()));
  const nlohmann::json* skus = util::json_array(j, "skus");
  if (!skus)
    return make_error(ErrorKind::unavailable,
                      fmt::format("{}: no skus array: not a Cloud Billing Catalog page", origin));
  GcpPage page;
  for (const auto& s : *skus) {
    if (!s.is_object()) continue;
    GcpSku sku;
    sku.description = str(s, "description");
    if (const nlohmann::json* c = util::json_object(s, "category")) {
      sku.resource_group = str(*c, "resourceGroup");
      sku.usage_type = str(*c, "usageType");
    }
    if (const nlohmann::json* r = util::json_array(s, "serviceRegions"))
      for (const auto& region : *r)
        if (auto name = util::json_string(&region)) sku.regions.push_back(std::move(*name));
    sku.text = "(missing)";
    const nlohmann::json* pi = util::json_array(s, "pricingInfo");
    const nlohmann::json* first = pi ? util::json_object(util::json_element(*pi, 0)) : nullptr;
    if (first) {
      if (const nlohmann::json* expr = util::json_object(*first, "pricingExpression")) {
        sku.usage_unit = str(*expr, "usageUnit");
        const nlohmann::json* tiers = util::json_array(*expr, "tieredRates");
        const nlohmann::json* last = tiers && !tiers->empty()
                                         ? util::json_object(util::json_element(*tiers, tiers->size() - 1))
                                         : nullptr;
        if (last) {
          // The last tier is the rate past any free amount (GPUs and cores have one tier).
          if (const nlohmann::json* price = util::json_object(*last, "unitPrice")) {
            std::optional<util::NanoUsd> units;
            std::string units_text = "0";
            if (const nlohmann::json* u = util::json_member(*price, "units"))
              read_price(u, units, units_text);
            else
              units = 0;
            std::int64_t nanos = 0;
            bool nanos_ok = true;
            const nlohmann::json* n = util::json_member(*price, "nanos");
            if (n) {
              const auto v = util::json_int(n);
              nanos_ok = v && *v > -1'000'000'000 && *v < 1'000'000'000;
              if (nanos_ok) nanos = *v;
            }
            sku.text = fmt::format("units {} nanos {}", units_text, n ? n->dump() : "0");
            // units is a whole number of dollars; parse_decimal_nanos gave it as nanos already.
            if (units && nanos_ok && *units % 1'000'000'000 == 0) sku.nanos = *units + nanos;
          }
        }
      }
    }
    page.skus.push_back(std::move(sku));
  }
  page.next_page_token = str(j, "nextPageToken");
  return page;
}

// ---- Lambda ---------------------------------------------------------------------------------------

Result<std::vector<LambdaType>> read_lambda_types(std::string_view json, std::string_view origin) {
  const nlohmann::json j = parse_json(json);
  if (j.is_discarded())
    return make_error(
        ErrorKind::unavailable,
        fmt::format("{}: not complete JSON ({} bytes): truncated or malformed", origin, json.size()));
  const nlohmann::json* data = util::json_object(j, "data");
  if (!data)
    return make_error(ErrorKind::unavailable,
                      fmt::format("{}: no data object: not Lambda's instance-types answer", origin));
  std::vector<LambdaType> out;
  for (const auto& [key, entry] : data->items()) {
    const nlohmann::json* it = util::json_object(entry, "instance_type");
    if (!it) continue;
    LambdaType t;
    t.name = str(*it, "name");
    if (t.name.empty()) t.name = key;
    t.gpu_description = str(*it, "gpu_description");
    std::optional<util::NanoUsd> c;
    read_price(util::json_member(*it, "price_cents_per_hour"), c, t.text);
    // Whole cents only; 1 cent = 10'000'000 nano-dollars.
    if (c && *c % 1'000'000'000 == 0 && *c / 1'000'000'000 < 100'000'000) t.nanos = *c / 100;
    if (!t.text.empty() && t.text != "(missing)") t.text += " cents";
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace gm::prices::detail
