// libFuzzer target: TOML files users write: the config file (--config, pricing section) and a model file
// (plan --model-file). Any bytes: an error naming the file, or a positive in-range price / a valid model.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "catalog/catalog.h"
#include "fuzz_util.h"
#include "meter/meter.h"
#include "plan/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  static const gm::catalog::Catalog catalog = [] {
    auto c = gm::catalog::Catalog::builtin();
    if (!c) std::abort();
    return *c;
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  gm::fuzz::MemFile file(text);
  gm::meter::PricingOptions options;
  options.config_path = file.path();
  auto q = gm::meter::resolve_price(options, catalog, std::string("NVIDIA H100 80GB HBM3"), nullptr);
  if (q) {
    check(q->micros_per_gpu_hour > 0);
    check(gm::meter::billed_cost(*q, gm::meter::billed_seconds(86'400'000, q->billing), 8) >= 0);
  } else {
    check(!q.error().message.empty());
  }

  auto m = gm::plan::parse_model_toml(text, "model.toml");
  if (m) {
    check(m->params > 0 && std::isfinite(m->params));
    check(m->active_params <= m->params);
    (void)gm::plan::params_from_shape(*m);
    (void)gm::plan::active_params_from_shape(*m);
  }
  return 0;
}
