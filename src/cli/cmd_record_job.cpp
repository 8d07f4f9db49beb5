// gpumeter record-job: a job metered elsewhere (the Slurm epilog, from the node agent's counters) recorded
// as a run in the ledger, so `gpumeter report --by slurm-account|user|partition` covers batch jobs too.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "cli/cli.h"
#include "cli/common.h"
#include "store/store.h"
#include "util/money.h"

namespace gm::cli {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto end = std::min(text.find(',', pos), text.size());
    if (end > pos) out.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

}  // namespace

int cmd_record_job(int argc, char** argv) {
  CLI::App app{
      "Record a job metered elsewhere (e.g. by the Slurm epilog from the agent) as a run in the ledger",
      "record-job"};
  std::optional<std::string> ledger_path;
  std::string name, user, gpus_allocated, gpus_used;
  std::optional<std::string> status;
  std::optional<std::string> stopped_by;
  std::vector<std::string> labels;
  std::int64_t start_unix = 0, end_unix = 0;
  std::string cost_usd = "0", idle_cost_usd = "0", unused_gpu_cost_usd = "0";  // parsed to micro-dollars
  std::optional<double> energy_j;
  std::optional<int> exit_code;
  app.add_option("--ledger", ledger_path,
                 "ledger file (default $GPUMETER_LEDGER or $XDG_DATA_HOME/gpumeter/ledger.db)");
  app.add_option("--name", name, "what ran (shown as the run's command)")->required();
  app.add_option("--user", user, "who ran it")->required();
  app.add_option("--start-unix", start_unix, "start, unix seconds")->required()->check(positive_number());
  app.add_option("--end-unix", end_unix, "end, unix seconds")->required()->check(positive_number());
  app.add_option("--status", status,
                 "succeeded | failed | interrupted (default: from --exit-code, 0 or none = succeeded)")
      ->check(CLI::IsMember({"succeeded", "failed", "interrupted"}));
  app.add_option("--stopped-by", stopped_by, "who stopped it (e.g. slurm:CANCELLED, slurm:TIMEOUT)");
  app.add_option("--exit-code", exit_code, "the job's exit status");
  app.add_option("--gpus-allocated", gpus_allocated, "allocated GPU UUIDs, comma-separated");
  app.add_option("--gpus-used", gpus_used, "GPU UUIDs where the job ran a process, comma-separated");
  app.add_option("--cost-usd", cost_usd, "cost on the GPUs it used, USD");
  app.add_option("--idle-cost-usd", idle_cost_usd, "idle part of --cost-usd, USD");
  app.add_option("--unused-gpu-cost-usd", unused_gpu_cost_usd, "allocated GPUs it never used, USD");
  app.add_option("--energy-j", energy_j, "energy, joules")->check(non_negative_number());
  app.add_option("--label", labels, "label KEY=VALUE (repeatable)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  if (end_unix < start_unix)
    return fail("record-job", make_error(ErrorKind::usage, "--end-unix is before --start-unix"));
  MicroUsd cost = 0, idle = 0, unused = 0;
  for (auto [flag, text, out] :
       {std::tuple{"--cost-usd", &cost_usd, &cost}, std::tuple{"--idle-cost-usd", &idle_cost_usd, &idle},
        std::tuple{"--unused-gpu-cost-usd", &unused_gpu_cost_usd, &unused}}) {
    auto micros = util::parse_usd_micros(*text);
    if (!micros)
      return fail("record-job",
                  make_error(ErrorKind::usage, std::string(flag) + ": " + micros.error().message));
    *out = *micros;
  }
  if (idle > cost)
    return fail("record-job", make_error(ErrorKind::usage, "--idle-cost-usd is more than --cost-usd"));

  store::RunRecord r;
  r.command = name;
  r.user = user;
  char host[256] = {};
  r.host = gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  for (const auto& l : labels) {
    const auto eq = l.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail("record-job", make_error(ErrorKind::usage, "--label '" + l + "': expected KEY=VALUE"));
    r.labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  r.start_unix_ms = start_unix * 1000;
  r.end_unix_ms = end_unix * 1000;
  r.status = exit_code.value_or(0) == 0 ? store::RunStatus::succeeded : store::RunStatus::failed;
  if (status) {
    auto given = util::parse_enum<store::RunStatus>(*status, "--status");  // one of IsMember's, so a status
    if (!given) return fail("record-job", given.error());
    r.status = *given;
  }
  r.exit_code = exit_code;
  r.stopped_by = stopped_by;
  r.gpus_allocated = split_list(gpus_allocated);
  r.gpus_used = split_list(gpus_used);
  r.wall_ms = (end_unix - start_unix) * 1000;
  r.billed_s = end_unix - start_unix;
  r.cost_micros = meter::combined_spend_micros(cost, unused);
  r.idle_cost_micros = idle;
  r.unused_gpu_cost_micros = unused;
  r.energy_j = energy_j.value_or(0);
  r.energy_method = energy_j ? store::RunEnergyMethod::agent : store::RunEnergyMethod::not_recorded;
  r.price_source = "gpumeter agent";
  r.heartbeat_unix_ms = r.end_unix_ms.value_or(0);

  if (auto it = r.labels.find("host"); it != r.labels.end()) {
    r.host = it->second;
    r.labels.erase(it);
  }

  auto location = store::ledger_location(ledger_path);
  if (!location) return fail("record-job", location.error());
  if (store::is_postgres_location(*location)) {
    // A shared ledger that cannot be reached: the run is spooled here and replayed later, never lost.
    store::SpoolingLedger ledger(*location, store::default_spool_dir());
    auto id = ledger.begin_run(r);
    if (!id) return fail("record-job", id.error());
    r.id = *id;
    if (auto u = ledger.update_run(r); !u) return fail("record-job", u.error());
    const std::int64_t final_id = ledger.finish();
    print_ledger_notes("record-job", ledger.take_notes());
    if (final_id > 0) std::printf("%lld\n", static_cast<long long>(final_id));
    return util::kExitOk;
  }
  auto ledger = open_ledger_for_writing(ledger_path);
  if (!ledger) return fail("record-job", ledger.error());
  auto id = (*ledger)->begin_run(r);
  if (!id) return fail("record-job", id.error());
  r.id = *id;
  if (auto u = (*ledger)->update_run(r); !u) return fail("record-job", u.error());
  std::printf("%lld\n", static_cast<long long>(*id));
  return util::kExitOk;
}

}  // namespace gm::cli
