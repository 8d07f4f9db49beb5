// libFuzzer target: the AWS Price List bulk CSV reader (prices update). Any bytes, fed in pieces whose size
// the first byte picks: an error naming the source, or rows whose kept prices are on-demand Linux rows of the
// region with an instance type; the same rows whatever the pieces.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "prices/detail/readers.h"

namespace {

struct Outcome {
  bool ok = false;
  std::vector<std::string> rows;
};

Outcome read(std::string_view text, std::size_t piece) {
  gm::prices::detail::AwsCsvReader reader("fuzz.csv", "us-east-1");
  Outcome out;
  for (std::size_t at = 0; at < text.size(); at += piece) {
    auto r = reader.feed(text.substr(at, piece));
    if (!r) {
      gm::fuzz::check(r.error().message.find("fuzz.csv") != std::string::npos);
      return out;
    }
  }
  auto f = reader.finish();
  if (!f) {
    gm::fuzz::check(f.error().message.find("fuzz.csv") != std::string::npos);
    return out;
  }
  out.ok = true;
  gm::fuzz::check(reader.prices().size() <= reader.rows());
  gm::fuzz::check(reader.filtered() <= reader.rows());
  for (const auto& p : reader.prices()) {
    gm::fuzz::check(!p.instance.empty() && p.region == "us-east-1" && !p.spot);
    if (p.nanos) gm::fuzz::check(*p.nanos == *gm::prices::detail::parse_decimal_nanos(p.text));
    out.rows.push_back(p.instance + "=" + p.text);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 16;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Outcome whole = read(text, text.size() + 1);
  const Outcome pieces = read(text, piece);
  gm::fuzz::check(whole.ok == pieces.ok);
  gm::fuzz::check(whole.rows == pieces.rows);
  return 0;
}
