#pragma once
// Model FLOPs utilisation of a supervised run: the client's FLOPs per token and the live figure.
#include <cstddef>
#include <optional>
#include <vector>

#include "guard/guard.h"
#include "store/store.h"

namespace gm::guard {

/// mfu_basis of a run whose FLOPs per token came from the job's client.
inline constexpr const char* kClientFlopsBasis = "client: progress(flops_per_token=...)";

/// The client's FLOPs per token (`progress(..., flops_per_token=F)`) becomes the run's MFU basis unless the
/// command line gave one (--model / --flops-per-token win: the user said so).
void adopt_client_flops(store::RunRecord& run, const ProgressUpdate& update);
/// MFU of a run so far: its tokens × FLOPs per token ÷ (peak × allocated GPUs × the time after its GPUs
/// first worked); nullopt before they worked or without tokens, FLOPs per token or a peak.
std::optional<double> live_mfu(const store::RunRecord& run,
                               const std::optional<store::ProgressRecord>& latest,
                               const std::vector<meter::GpuUsage>& gpus, std::optional<double> peak_tflops,
                               std::size_t allocated, double elapsed_s);

}  // namespace gm::guard
