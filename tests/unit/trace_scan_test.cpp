// The element scanner that cuts a trace's event array into batches (docs/trace.md "Memory"): the 64-byte
// block scanner, with every instruction set this CPU runs, agrees with the byte-at-a-time reference on
// random JSON-like text fed in random pieces, and on real traces it finds exactly the commas between events.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "support/support.h"
#include "trace/scan.h"
#include "trace/trace.h"

namespace gm::test {
namespace {

using trace::detail::ElementScan;
using trace::detail::ElementScanState;
using trace::detail::ScanIsa;

/// Every separator found and where the array ended, scanning `text` in the given piece lengths.
struct Scanned {
  std::vector<std::size_t> commas;  // the last comma reported by each piece, as an offset into text
  std::size_t end = ElementScan::npos;
  bool in_string = false, escape = false;
  std::int64_t depth = 0;
  bool operator==(const Scanned&) const = default;
};

template <class Fn>
Scanned scan_in_pieces(const std::string& text, const std::vector<std::size_t>& pieces, Fn scan) {
  Scanned out;
  ElementScanState state;
  std::size_t pos = 0;
  for (std::size_t len : pieces) {
    len = std::min(len, text.size() - pos);
    const ElementScan r = scan(text.data() + pos, len, state);
    if (r.last_comma != ElementScan::npos) out.commas.push_back(pos + r.last_comma);
    if (r.array_end != ElementScan::npos) {
      out.end = pos + r.array_end;
      return out;
    }
    pos += len;
    if (pos == text.size()) break;
  }
  out.in_string = state.in_string;
  out.escape = state.escape;
  out.depth = state.depth;
  return out;
}

std::vector<ScanIsa> isas_of_this_cpu() {
  std::vector<ScanIsa> out{ScanIsa::none, ScanIsa::best};
  for (ScanIsa isa : {ScanIsa::avx2, ScanIsa::avx512})
    if (trace::detail::scan_isa_supported(isa)) out.push_back(isa);
  return out;
}

TEST(TraceScan, BlockScannerAgreesWithTheBytewiseReferenceOnRandomTextInRandomPieces) {
  // Text made mostly of what the scanner looks for: quotes, runs of backslashes, brackets, commas.
  std::mt19937_64 rng(20261125);
  const std::string alphabet = "\"\"\\\\\\{}[],,, a\n";
  for (int round = 0; round < 3000; ++round) {
    const std::size_t len = rng() % 600;
    std::string text(len, ' ');
    for (auto& c : text) c = alphabet[rng() % alphabet.size()];
    std::vector<std::size_t> pieces;
    for (std::size_t left = len; left > 0;) {
      const std::size_t p = std::min<std::size_t>(left, 1 + rng() % (round % 2 ? 200 : 7));
      pieces.push_back(p);
      left -= p;
    }
    const auto expected = scan_in_pieces(text, pieces, [](const char* d, std::size_t n, ElementScanState& s) {
      return trace::detail::scan_elements_bytewise(d, n, s);
    });
    for (ScanIsa isa : isas_of_this_cpu()) {
      const auto got = scan_in_pieces(text, pieces, [isa](const char* d, std::size_t n, ElementScanState& s) {
        return trace::detail::scan_elements(d, n, s, isa);
      });
      ASSERT_EQ(got, expected) << "round " << round << ", isa " << static_cast<int>(isa)
                               << ", text: " << text;
    }
  }
}

TEST(TraceScan, EscapedQuotesAndBackslashRunsAcrossBlockBoundaries) {
  // A string whose escapes straddle the 64-byte blocks at every offset: a comma inside it is never a cut,
  // the one after it is.
  for (std::size_t pad = 0; pad < 130; ++pad) {
    const std::string text = std::string(pad, ' ') + "{\"k\":\"a\\\\\\\", b\\\\\"},{}]";
    //                                                 the string is a\\\", b\\  (escaped quote inside)
    const std::size_t cut = text.find("},{") + 1, end = text.size() - 1;
    for (ScanIsa isa : isas_of_this_cpu()) {
      ElementScanState state;
      const ElementScan r = trace::detail::scan_elements(text.data(), text.size(), state, isa);
      EXPECT_EQ(r.last_comma, cut) << "pad " << pad;
      EXPECT_EQ(r.array_end, end) << "pad " << pad;
    }
  }
}

TEST(TraceScan, OnARealTraceEveryCutIsBetweenTwoEvents) {
  // The events of a real trace (the NCCL sample: names with templates, parentheses, quotes in args),
  // scanned in 4 KiB pieces: each reported comma is followed, after whitespace, by the next event's '{'
  // and preceded by the '}' of the one before, and the scan ends at the array's ']'.
  auto text = trace::read_trace_text(sample_traces_dir() + "/nccl_parser_config/nccl_data.json.gz");
  ASSERT_TRUE(text.ok()) << text.error().message;
  const std::size_t open = text->find('[', text->find("\"traceEvents\""));
  ASSERT_NE(open, std::string::npos);
  const std::string events = text->substr(open + 1);
  std::vector<std::size_t> pieces(events.size() / 4096 + 1, 4096);
  const auto got = scan_in_pieces(events, pieces, [](const char* d, std::size_t n, ElementScanState& s) {
    return trace::detail::scan_elements(d, n, s);
  });
  ASSERT_NE(got.end, ElementScan::npos);
  EXPECT_GT(got.commas.size(), 100u);
  for (std::size_t c : got.commas) {
    const auto next = events.find_first_not_of(" \n\r\t", c + 1);
    const auto prev = events.find_last_not_of(" \n\r\t", c - 1);
    ASSERT_EQ(events[next], '{') << "at " << c;
    ASSERT_EQ(events[prev], '}') << "at " << c;
  }
  EXPECT_EQ(events[got.end], ']');
  // What follows is the rest of the trace object (its other members), not more events.
  EXPECT_EQ(events.find("\"ph\"", got.end), std::string::npos);
}

}  // namespace
}  // namespace gm::test
