// libFuzzer target: the JSON price readers of prices update (Azure Retail Prices pages, GCP Cloud Billing
// Catalog pages, Lambda instance types); the first byte picks the reader. Any bytes: an error naming the
// source, or rows whose prices, when read, equal their text read as an exact decimal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "prices/detail/readers.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  namespace d = gm::prices::detail;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto page = d::read_azure_page(text, "azure-page");
      if (!page) {
        check(page.error().message.find("azure-page") != std::string::npos);
        return 0;
      }
      check(page->filtered + page->prices.size() <= page->items);
      for (const auto& p : page->prices) {
        check(!p.instance.empty());
        if (p.nanos) check(d::parse_decimal_nanos(p.text) == p.nanos);
      }
      break;
    }
    case 1: {
      auto page = d::read_gcp_page(text, "gcp-page");
      if (!page) {
        check(page.error().message.find("gcp-page") != std::string::npos);
        return 0;
      }
      for (const auto& s : page->skus) (void)s.nanos;
      break;
    }
    default: {
      auto types = d::read_lambda_types(text, "lambda");
      if (!types) {
        check(types.error().message.find("lambda") != std::string::npos);
        return 0;
      }
      for (const auto& t : *types)
        if (t.nanos) check(*t.nanos % 10'000'000 == 0);
      break;
    }
  }
  return 0;
}
