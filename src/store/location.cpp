// Where the ledger is (flag, environment, config file, default) and opening it for a command, with the runs
// spooled while a shared ledger was unreachable replayed into it first.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "store/store.h"
#include "util/config.h"

namespace gm::store {

Result<std::string> ledger_location(const std::optional<std::string>& flag) {
  if (flag) {
    if (flag->empty()) return make_error(ErrorKind::usage, "--ledger: empty location");
    return *flag;
  }
  if (const char* p = std::getenv("GPUMETER_LEDGER"); p && *p) return std::string(p);
  const auto config = util::user_config_file();
  std::error_code ec;
  if (config && std::filesystem::exists(*config, ec)) {
    GM_TRY(const toml::table tbl, util::parse_config_file(*config));
    if (auto node = tbl["ledger"]["location"]) {
      if (auto s = node.value<std::string>(); s && !s->empty()) return *s;
      return make_error(ErrorKind::usage, *config + ": [ledger] location must be a non-empty string");
    }
  }
  return Ledger::default_path();
}

namespace {
void replay_into(Ledger& ledger, std::vector<std::string>& notes) {
  if (!is_postgres_location(ledger.describe())) return;
  auto n = replay_spool(ledger, default_spool_dir());
  if (!n)
    notes.push_back("spooled runs could not be replayed yet: " + n.error().message);
  else if (*n > 0)
    notes.push_back(fmt::format("replayed {} spooled run(s) into {}", *n, ledger.describe()));
}
}  // namespace

Result<std::unique_ptr<Ledger>> open_ledger(const std::optional<std::string>& flag, bool create,
                                            std::vector<std::string>& notes) {
  GM_TRY(const std::string p, ledger_location(flag));
  if (!create && !is_postgres_location(p)) {
    const std::string file = p.rfind("sqlite:", 0) == 0 ? p.substr(7) : p;
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
      return make_error(
          ErrorKind::not_found,
          "no ledger at " + file +
              (flag ? " (check --ledger)" : " (no run recorded yet: `gpumeter run` creates it)"));
  }
  GM_TRY(std::unique_ptr<Ledger> ledger, Ledger::open(p));
  replay_into(*ledger, notes);
  return ledger;
}

}  // namespace gm::store
