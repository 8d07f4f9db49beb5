// libFuzzer target: the job's own output (tqdm bars, nested bars, Trainer / Lightning logs, \r redraws, ANSI
// colours, invalid UTF-8) scanned for progress through the public API only. Whatever the bytes and however
// they are split into reads: no crash, no hang, steps within 0..total, finite metrics, and the chunking
// never changes what is recognised.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "guard/guard.h"

namespace {

void check_update(const gm::guard::ProgressUpdate& u) {
  using gm::fuzz::check;
  for (const auto& v : {u.step, u.total_steps, u.samples, u.tokens}) check(!v || *v >= 0);
  if (u.step && u.total_steps) check(*u.step <= *u.total_steps);
  if (u.total_steps) check(*u.total_steps > 0);
  for (const auto& [k, v] : u.metrics) check(std::isfinite(v));
}

bool same(const gm::guard::ProgressUpdate& a, const gm::guard::ProgressUpdate& b) {
  return a.step == b.step && a.total_steps == b.total_steps && a.samples == b.samples &&
         a.tokens == b.tokens && a.metrics == b.metrics;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  if (size == 0) return 0;
  // The first byte chooses how the rest is split into reads (1..255 bytes, or all at once for 0).
  const std::size_t chunk = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  gm::guard::OutputProgressParser whole;
  const std::vector<gm::guard::ProgressUpdate> all = whole.feed(text);
  for (const auto& u : all) check_update(u);

  if (chunk != 0) {
    gm::guard::OutputProgressParser pieces;
    std::vector<gm::guard::ProgressUpdate> split;
    for (std::size_t pos = 0; pos < text.size(); pos += chunk) {
      auto got = pieces.feed(text.substr(pos, chunk));
      split.insert(split.end(), got.begin(), got.end());
    }
    check(split.size() == all.size());
    for (std::size_t i = 0; i < all.size(); ++i) check(same(split[i], all[i]));
  }

  // Each line on its own, as the session may call it.
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n' || text[i] == '\r') {
      if (auto u = gm::guard::parse_output_line(text.substr(start, i - start))) check_update(*u);
      start = i + 1;
    }
  }
  return 0;
}
