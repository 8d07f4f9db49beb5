#include "report/load.h"

#include <fmt/format.h>

#include <charconv>

#include "catalog/catalog.h"
#include "report/run_report.h"

namespace gm::report {

Result<store::RunRecord> resolve_run(const store::Ledger& ledger, std::string_view ref) {
  if (ref == "last") return ledger.last_run();
  std::int64_t id = 0;
  auto [end, ec] = std::from_chars(ref.data(), ref.data() + ref.size(), id);
  if (ec != std::errc() || end != ref.data() + ref.size() || id <= 0)
    return make_error(ErrorKind::usage,
                      "run '" + std::string(ref) + "': expected a run id (see `gpumeter runs`) or 'last'");
  auto run = ledger.run(id);
  if (!run && run.error().kind == ErrorKind::not_found)
    return make_error(ErrorKind::not_found,
                      "no run " + std::to_string(id) + " in the ledger (see `gpumeter runs`)");
  return run;
}

Result<RunHtmlInput> load_run_html_input(const store::Ledger& ledger, const store::RunRecord& run,
                                         const KpiOptions& options, const catalog::GpuSpec* gpu) {
  RunHtmlInput in;
  in.run = run;
  GM_TRY(in.samples, ledger.samples(run.id));
  GM_TRY(in.progress, ledger.progress(run.id));
  GM_TRY(in.actions, ledger.actions(run.id));
  in.kpis = compute_kpis(run, in.progress, gpu, options);
  return in;
}

Result<RunHtmlInput> load_run_page(const store::Ledger& ledger, const store::RunRecord& run,
                                   const KpiOptions& options) {
  // The catalog gives the GPU's dense peak for MFU; without it the page says why MFU is missing.
  auto catalog = catalog::Catalog::builtin();
  const catalog::GpuSpec* gpu = nullptr;
  if (catalog) {
    gpu = catalog->find_gpu(run.gpu_model);
    if (!gpu) gpu = catalog->gpu_for_device_name(run.gpu_model);
  }
  GM_TRY(RunHtmlInput input, load_run_html_input(ledger, run, options, gpu));
  if (catalog) {
    auto rr = load_run_report(ledger, run.id, &*catalog);
    if (rr) input.findings = rr->findings;
    // The run's own MFU basis (--model, --flops-per-token, the client's flops_per_token) unless --params.
    if (rr && rr->mfu && !options.params && input.kpis) {
      input.kpis->mfu = rr->mfu;
      input.kpis->mfu_note = rr->mfu_basis.value_or("");
      input.kpis->model_flops_per_token = rr->flops_per_token;
    }
    if (rr && rr->rightsizing) {
      const auto& h = *rr->rightsizing;
      input.rightsizing_hint =
          fmt::format("{} holds the observed {:.1f} GiB peak at {:.2f}x the price ({}); {}", h.gpu,
                      static_cast<double>(h.peak_bytes) / (1024.0 * 1024.0 * 1024.0), h.price_ratio,
                      h.price_basis, h.assumption);
    }
  }
  return input;
}

Result<CompareSide> load_compare_side(const store::Ledger& ledger, std::string_view ref) {
  CompareSide side;
  GM_TRY(side.run, resolve_run(ledger, ref));
  GM_TRY(side.progress, ledger.progress(side.run.id));
  GM_TRY(side.inference, ledger.inference(side.run.id));
  return side;
}

Result<std::vector<ScalingInput>> load_scaling_inputs(const store::Ledger& ledger,
                                                      const std::vector<std::string>& refs) {
  std::vector<ScalingInput> inputs;
  for (const auto& ref : refs) {
    GM_TRY(store::RunRecord run, resolve_run(ledger, ref));
    GM_TRY(auto progress, ledger.progress(run.id));
    inputs.push_back(ScalingInput{std::move(run), std::move(progress)});
  }
  return inputs;
}

}  // namespace gm::report
