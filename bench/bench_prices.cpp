// prices update's AWS reader over a synthetic price list in the bulk CSV's shape (the real us-east-1 EC2 file
// is hundreds of MB, of which a few hundred rows are kept): 200 000 rows of the real header's 39 columns, one
// in eight an on-demand Linux row, fed in 64 KiB pieces as the HTTP body arrives. Reported as bytes per
// second.
#include <benchmark/benchmark.h>

#include <string>

#include "prices/detail/readers.h"

namespace {

const std::string& synthetic_csv() {
  static const std::string csv = [] {
    std::string s =
        "\"FormatVersion\",\"v1.0\"\n\"Disclaimer\",\"This pricing list is for informational purposes "
        "only.\"\n"
        "\"Publication "
        "Date\",\"2026-11-20T18:02:44Z\"\n\"Version\",\"20261120180244\"\n\"OfferCode\",\"AmazonEC2\"\n"
        "\"SKU\",\"OfferTermCode\",\"RateCode\",\"TermType\",\"PriceDescription\",\"EffectiveDate\","
        "\"StartingRange\","
        "\"EndingRange\",\"Unit\",\"PricePerUnit\",\"Currency\",\"LeaseContractLength\",\"PurchaseOption\","
        "\"OfferingClass\",\"Product Family\",\"serviceCode\",\"Location\",\"Location Type\",\"Instance "
        "Type\","
        "\"Current Generation\",\"Instance Family\",\"vCPU\",\"Physical Processor\",\"Clock "
        "Speed\",\"Memory\","
        "\"Storage\",\"Network Performance\",\"Processor Architecture\",\"Tenancy\",\"Operating System\","
        "\"License Model\",\"Usage Type\",\"Operation\",\"CapacityStatus\",\"GPU\",\"GPU Memory\","
        "\"Pre Installed S/W\",\"Region Code\",\"serviceName\"\n";
    const char* os[] = {"Linux", "Windows",   "RHEL", "SUSE", "Linux", "Red Hat Enterprise Linux with HA",
                        "Linux", "Ubuntu Pro"};
    const char* tenancy[] = {"Shared", "Dedicated", "Host"};
    for (int i = 0; i < 200'000; ++i) {
      const bool on_demand = i % 3 != 2;
      s += "\"SKU" + std::to_string(i) + "\",\"JRTCKXETXF\",\"SKU" + std::to_string(i) +
           ".JRTCKXETXF.6YS6EN2CT7\",\"" + (on_demand ? "OnDemand" : "Reserved") +
           "\",\"$1.234 per On Demand Linux g6.xlarge Instance Hour\","
           "\"2026-11-01\",\"0\",\"Inf\",\"Hrs\",\"" +
           std::to_string(1 + i % 97) +
           ".2340000000\",\"USD\",\"\",\"\","
           "\"\",\"Compute Instance\",\"AmazonEC2\",\"US East (N. Virginia)\",\"AWS Region\",\"g6." +
           std::to_string(1 + i % 48) +
           "xlarge\",\"Yes\",\"GPU instance\",\"4\",\"AMD EPYC 7R13 Processor, 3rd gen\","
           "\"2.95 GHz\",\"16 GiB\",\"1 x 250 NVMe SSD\",\"Up to 10 Gigabit\",\"64-bit\",\"" +
           tenancy[i % 3] + "\",\"" + os[i % 8] +
           "\",\"No License required\",\"BoxUsage:g6.xlarge\",\"RunInstances\",\"" +
           (i % 5 == 0 ? "UnusedCapacityReservation" : "Used") +
           "\",\"1\",\"24 GB\",\"NA\",\"us-east-1\","
           "\"Amazon Elastic Compute Cloud\"\n";
    }
    return s;
  }();
  return csv;
}

void BM_AwsCsvReader(benchmark::State& state) {
  const std::string& csv = synthetic_csv();
  std::size_t kept = 0;
  for (auto _ : state) {
    gm::prices::detail::AwsCsvReader reader("bench.csv", "us-east-1");
    for (std::size_t at = 0; at < csv.size(); at += 65'536)
      if (!reader.feed(std::string_view(csv).substr(at, 65'536))) state.SkipWithError("feed failed");
    if (!reader.finish()) state.SkipWithError("finish failed");
    kept = reader.prices().size();
    benchmark::DoNotOptimize(kept);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * csv.size()));
  state.counters["rows_kept"] = static_cast<double>(kept);
  state.counters["mb"] = static_cast<double>(csv.size()) / 1e6;
}
BENCHMARK(BM_AwsCsvReader)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
