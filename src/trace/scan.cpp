// Element boundaries of a JSON array, 64 bytes at a time (see scan.h).
#include "trace/scan.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstring>

namespace gm::trace::detail {
namespace {

/// One bit per byte of a 64-byte block.
struct BlockMasks {
  std::uint64_t quote = 0, backslash = 0, open = 0, close = 0, comma = 0;
};

/// Fills the masks of `blocks` 64-byte blocks at `p`.
using MaskFn = void (*)(const char* p, std::size_t blocks, BlockMasks* out);

// '[' and ']' differ from '{' and '}' only in bit 0x20: or-ing it in folds each pair into one compare.
constexpr char kFold = 0x20;

#if defined(__x86_64__)
__attribute__((target("avx512bw"))) void masks_avx512(const char* p, std::size_t blocks, BlockMasks* out) {
  const __m512i quote = _mm512_set1_epi8('"'), backslash = _mm512_set1_epi8('\\'),
                comma = _mm512_set1_epi8(',');
  const __m512i fold = _mm512_set1_epi8(kFold), open = _mm512_set1_epi8('{'), close = _mm512_set1_epi8('}');
  for (std::size_t i = 0; i < blocks; ++i, p += 64) {
    const __m512i v = _mm512_loadu_si512(p);
    const __m512i folded = _mm512_or_si512(v, fold);
    out[i] = {_mm512_cmpeq_epi8_mask(v, quote), _mm512_cmpeq_epi8_mask(v, backslash),
              _mm512_cmpeq_epi8_mask(folded, open), _mm512_cmpeq_epi8_mask(folded, close),
              _mm512_cmpeq_epi8_mask(v, comma)};
  }
}

__attribute__((target("avx2"))) void masks_avx2(const char* p, std::size_t blocks, BlockMasks* out) {
  const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\'),
                comma = _mm256_set1_epi8(',');
  const __m256i fold = _mm256_set1_epi8(kFold), open = _mm256_set1_epi8('{'), close = _mm256_set1_epi8('}');
  for (std::size_t i = 0; i < blocks; ++i, p += 64) {
    BlockMasks m;
    for (int half = 0; half < 2; ++half) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * half));
      const __m256i folded = _mm256_or_si256(v, fold);
      const int shift = 32 * half;
      m.quote |= std::uint64_t{static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, quote)))}
                 << shift;
      m.backslash |=
          std::uint64_t{static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, backslash)))}
          << shift;
      m.comma |= std::uint64_t{static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, comma)))}
                 << shift;
      m.open |=
          std::uint64_t{static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(folded, open)))}
          << shift;
      m.close |=
          std::uint64_t{static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(folded, close)))}
          << shift;
    }
    out[i] = m;
  }
}
#endif

/// Without vector instructions (and the reference for them).
void masks_bytewise(const char* p, std::size_t blocks, BlockMasks* out) {
  for (std::size_t b = 0; b < blocks; ++b, p += 64) {
    BlockMasks m;
    for (int i = 0; i < 64; ++i) {
      const std::uint64_t bit = std::uint64_t{1} << i;
      const char c = p[i];
      const char folded = static_cast<char>(c | kFold);
      if (c == '"') m.quote |= bit;
      if (c == '\\') m.backslash |= bit;
      if (c == ',') m.comma |= bit;
      if (folded == '{') m.open |= bit;
      if (folded == '}') m.close |= bit;
    }
    out[b] = m;
  }
}

bool cpu_has(ScanIsa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (isa == ScanIsa::avx512) return __builtin_cpu_supports("avx512bw");
  if (isa == ScanIsa::avx2) return __builtin_cpu_supports("avx2");
#endif
  return isa == ScanIsa::none || isa == ScanIsa::best;
}

/// The mask function of `isa`; for best, the widest this CPU runs.
MaskFn masks_for(ScanIsa isa) {
#if defined(__x86_64__)
  if (isa == ScanIsa::best)
    isa = cpu_has(ScanIsa::avx512) ? ScanIsa::avx512 : cpu_has(ScanIsa::avx2) ? ScanIsa::avx2 : ScanIsa::none;
  if (isa == ScanIsa::avx512) return masks_avx512;
  if (isa == ScanIsa::avx2) return masks_avx2;
#endif
  return masks_bytewise;
}

/// Bit i set when an odd number of bits at or below i are set.
std::uint64_t prefix_xor(std::uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

/// Bits [from, to) of a 64-bit mask.
std::uint64_t bit_range(int from, int to) {
  const std::uint64_t below_to = to >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << to) - 1;
  const std::uint64_t from_up = from >= 64 ? 0 : ~std::uint64_t{0} << from;
  return below_to & from_up;
}

/// Scans one block of which the first `real` bytes are data (the rest spaces); false when the array ended.
bool scan_block(const BlockMasks& m, int real, std::size_t base, ElementScanState& state, ElementScan& out) {
  // Bytes escaped by a backslash: the byte after each backslash that is not itself escaped. Backslashes
  // are rare in traces, so they are walked one by one.
  std::uint64_t escaped = 0, b = m.backslash;
  bool carry = false;
  if (state.escape) {
    escaped = 1;
    b &= ~std::uint64_t{1};
  }
  while (b != 0) {
    const int i = std::countr_zero(b);
    b &= b - 1;
    if (i == real - 1) {
      carry = true;
      break;
    }
    const std::uint64_t next = std::uint64_t{1} << (i + 1);
    escaped |= next;
    b &= ~next;
  }
  state.escape = carry;
  std::uint64_t in_string = prefix_xor(m.quote & ~escaped);
  if (state.in_string) in_string = ~in_string;
  state.in_string = (in_string >> 63) != 0;
  const std::uint64_t outside = ~in_string, open = m.open & outside, comma = m.comma & outside;
  const std::uint64_t close = m.close & outside;
  std::int64_t depth = state.depth;
  // Inside an event the depth cannot reach 0 in this block when there are fewer closing brackets than
  // levels open: no separator and no end of the array here, only the depth to carry on.
  if (depth > std::popcount(close)) {
    state.depth = depth + std::popcount(open) - std::popcount(close);
    return true;
  }
  // The last comma of bits [from, to), which the caller has at depth 0.
  auto note_commas = [&](int from, int to) {
    const std::uint64_t c = comma & bit_range(from, to);
    if (c != 0) out.last_comma = base + static_cast<std::size_t>(63 - std::countl_zero(c));
  };
  std::uint64_t brackets = open | close;
  int from = 0;
  while (brackets != 0) {
    const int i = std::countr_zero(brackets);
    brackets &= brackets - 1;
    if (depth == 0) note_commas(from, i);
    if ((open >> i) & 1) {
      ++depth;
    } else if (--depth < 0) {
      out.array_end = base + static_cast<std::size_t>(i);
      state.depth = depth;
      return false;
    }
    from = i + 1;
  }
  if (depth == 0) note_commas(from, 64);
  state.depth = depth;
  return true;
}

}  // namespace

bool scan_isa_supported(ScanIsa isa) {
  return cpu_has(isa);
}

ElementScan scan_elements(const char* data, std::size_t n, ElementScanState& state, ScanIsa isa) {
  static const MaskFn best = masks_for(ScanIsa::best);
  const MaskFn masks = isa == ScanIsa::best || !cpu_has(isa) ? best : masks_for(isa);
  constexpr std::size_t kBlocks = 64;  // masks computed 4 KiB at a time
  BlockMasks m[kBlocks];
  ElementScan out;
  std::size_t pos = 0;
  while (n - pos >= 64) {
    const std::size_t blocks = std::min(kBlocks, (n - pos) / 64);
    masks(data + pos, blocks, m);
    for (std::size_t i = 0; i < blocks; ++i, pos += 64)
      if (!scan_block(m[i], 64, pos, state, out)) return out;
  }
  if (pos < n) {
    char tail[64];
    std::memset(tail, ' ', sizeof tail);
    std::memcpy(tail, data + pos, n - pos);
    masks(tail, 1, m);
    scan_block(m[0], static_cast<int>(n - pos), pos, state, out);
  }
  return out;
}

ElementScan scan_elements_bytewise(const char* data, std::size_t n, ElementScanState& state) {
  ElementScan out;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = data[i];
    const bool escaped = state.escape;
    state.escape = c == '\\' && !escaped;
    if (c == '"' && !escaped) {
      state.in_string = !state.in_string;
      continue;
    }
    if (state.in_string) continue;
    if (c == '{' || c == '[') {
      ++state.depth;
    } else if (c == '}' || c == ']') {
      if (--state.depth < 0) {
        out.array_end = i;
        return out;
      }
    } else if (c == ',' && state.depth == 0) {
      out.last_comma = i;
    }
  }
  return out;
}

}  // namespace gm::trace::detail
