// gpumeter ledger migrate | copy: the ledger's schema and moving a ledger to another back end.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>

#include "cli/cli.h"
#include "cli/common.h"

namespace gm::cli {

namespace {

int ledger_migrate(int argc, char** argv) {
  CLI::App app{"Create or migrate the ledger's schema to this gpumeter's version", "ledger migrate"};
  std::optional<std::string> location;
  app.add_option("--ledger", location, "ledger: a SQLite path or postgresql://user@host:port/db");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto ledger = open_ledger_for_writing(location);
  if (!ledger) return fail("ledger migrate", ledger.error());
  auto version = (*ledger)->schema_version();
  if (!version) return fail("ledger migrate", version.error());
  std::printf("ledger %s (%s): schema version %d\n", (*ledger)->describe().c_str(),
              (*ledger)->backend().c_str(), *version);
  return util::kExitOk;
}

int ledger_copy(int argc, char** argv) {
  CLI::App app{
      "Copy every run and budget of one ledger into another (idempotent: a second copy adds nothing)",
      "ledger copy"};
  std::string from, to;
  app.add_option("--from", from, "source ledger: sqlite:PATH, a path, or postgresql://…")->required();
  app.add_option("--to", to, "destination ledger: postgresql://user@host:port/db, sqlite:PATH or a path")
      ->required();
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto source = open_ledger_for_reading(from);
  if (!source) return fail("ledger copy", source.error());
  auto dest = store::Ledger::open(to);
  if (!dest) return fail("ledger copy", dest.error());
  auto copied = store::copy_ledger(**source, **dest);
  if (!copied) return fail("ledger copy", copied.error());
  std::printf("copied %zu run(s) from %s to %s\n", *copied, (*source)->describe().c_str(),
              (*dest)->describe().c_str());
  return util::kExitOk;
}

}  // namespace

int cmd_ledger(int argc, char** argv) {
  const Subcommand subcommands[] = {{"migrate", ledger_migrate}, {"copy", ledger_copy}};
  return dispatch_subcommands(
      "ledger", argc, argv,
      "The ledger's schema, and moving a ledger to another back end\n"
      "Usage: ledger migrate [--ledger LOCATION]\n"
      "       ledger copy --from sqlite:PATH --to postgresql://user@host:port/db\n\n"
      "Subcommands:\n"
      "  migrate     create the ledger's tables or migrate them to this gpumeter's schema version\n"
      "  copy        copy every run (samples, progress, actions, rollups, serving counters) and budget\n\n"
      "Options:\n"
      "  -h,--help   Print this help message and exit (SUBCOMMAND --help: its options)\n",
      subcommands);
}

}  // namespace gm::cli
