#pragma once
// `gpumeter demo` section for trace analysis: renders the analysis of a bundled Kineto sample.
#include <cstdio>
#include <optional>
#include <string>

#include "util/money.h"

namespace gm::cli {

/// The bundled sample (data/demo/trace.json, embedded): a small Kineto trace in the torch.profiler format
/// (the unit tests check its figures). NUL-terminated.
const char* demo_trace_json();

/// Analyses the bundled sample trace (one training step on an H100: two GEMMs on two streams, an NCCL
/// all-reduce overlapping them, a memcpy, a host-wait gap) and prints the `gpumeter trace` report to
/// `out`, priced at `price_micros_per_gpu_hour` (labelled with `price_source`) or in time only when none.
/// Returns 0, or 1 after printing an error if the sample does not parse.
int trace_demo_section(std::optional<MicroUsd> price_micros_per_gpu_hour, const std::string& price_source,
                       std::FILE* out = stdout);

}  // namespace gm::cli
