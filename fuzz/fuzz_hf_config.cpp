// libFuzzer target: plan's Hugging Face config.json reader. Any bytes: an error naming the file, or a model
// whose parameter count and planned training peak are finite and positive.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "plan/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = gm::plan::parse_hf_config(text, "fuzz.json", "fuzz");
  if (!m) {
    check(m.error().message.find("fuzz.json") != std::string::npos);
    return 0;
  }
  check(m->params > 0 && std::isfinite(m->params));
  check(m->active_params > 0 && m->active_params <= m->params);
  gm::plan::JobSpec job;
  job.model = *m;
  job.task = gm::plan::Task::train;
  job.seq = 128;
  job.attention = size % 2 ? gm::plan::Attention::eager : gm::plan::Attention::sdpa;
  const auto mem = gm::plan::estimate_memory(job, gm::plan::Parallelism{});
  check(std::isfinite(mem.total_bytes) && mem.total_bytes > 0 && mem.peak_bytes <= mem.total_bytes);
  return 0;
}
