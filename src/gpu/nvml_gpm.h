#pragma once
// NVML GPM (GPU Performance Monitoring, Hopper and newer) without nvml.h (internal to src/gpu): the entry
// points, the request of the metrics gpumeter reads, and decoding of NVML's answer. A metric needs two
// samples one interval apart: each target (a board or a MIG instance) keeps two buffers used alternately,
// so one new sample per interval pairs with the previous one (no extra thread, no sleep).
#include <optional>
#include <string>

#include "gpu/gpu.h"
#include "gpu/nvml_abi.h"
#include "gpu/nvml_loader.h"

namespace gm::gpu::nvml {

using GpmQueryFn = Return (*)(Device, GpmSupport*);
using GpmAllocFn = Return (*)(GpmSample*);
using GpmFreeFn = Return (*)(GpmSample);
using GpmSampleFn = Return (*)(Device, GpmSample);
using GpmMigSampleFn = Return (*)(Device, unsigned, GpmSample);
using GpmMetricsFn = Return (*)(GpmMetricsGet*);

/// The GPM entry points of the opened library; absent ones stay null.
struct GpmApi {
  GpmQueryFn query = nullptr;           ///< nvmlGpmQueryDeviceSupport
  GpmAllocFn alloc = nullptr;           ///< nvmlGpmSampleAlloc
  GpmFreeFn free = nullptr;             ///< nvmlGpmSampleFree
  GpmSampleFn sample = nullptr;         ///< nvmlGpmSampleGet
  GpmMigSampleFn mig_sample = nullptr;  ///< nvmlGpmMigSampleGet
  GpmMetricsFn metrics = nullptr;       ///< nvmlGpmMetricsGet

  /// Resolves every entry point by NVML's names.
  static GpmApi resolve(const Library& lib);
  /// True when board samples can be taken and decoded (query, alloc, free, sample, metrics present).
  bool usable() const;
  /// The names of the absent entry points needed for board samples, comma-separated ("" when usable).
  std::string missing() const;
};

/// Two sample buffers of one target, used alternately.
struct GpmPair {
  GpmSample buf[2] = {nullptr, nullptr};
  int newest = -1;      ///< which buffer holds the last sample taken; -1: none yet
  bool active = false;  ///< the target answered its first sample (GPM works on it)
  bool allocated() const { return buf[0] != nullptr && buf[1] != nullptr; }
  /// The buffer the next sample goes into.
  int next() const { return newest == 0 ? 1 : 0; }
};

/// Fills `req` (version, count, the two samples, the metric ids gpumeter reads).
void fill_gpm_request(GpmMetricsGet& req, GpmSample first, GpmSample second);
/// The metrics of an answered request: a metric whose nvmlReturn is not SUCCESS or whose value is not a
/// finite number is nullopt (never 0); values are clamped to 0-100.
GpmMetrics decode_gpm(const GpmMetricsGet& answer);

}  // namespace gm::gpu::nvml
