// The spool: a run on a shared ledger that cannot be reached goes on into a local SQLite ledger, replayed
// into the shared one later. Files under the spool directory, per spooled run STEM:
//   STEM.json  {"ledger": the ledger's location (redacted), "target_run_id": N or 0}   written first
//   STEM.db    a SQLite ledger holding the one run
//   STEM.lock  held (flock) by the gpumeter still writing it: a replay leaves such a spool alone
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "store/detail.h"
#include "util/json_in.h"

namespace gm::store {

using store::detail::now_unix_ms;

namespace {

std::string spool_key(const std::string& stem) {
  return "spool:" + stem;
}

void remove_spool_files(const std::string& dir, const std::string& stem) {
  std::error_code ec;
  for (const char* ext : {".db", ".db-wal", ".db-shm", ".json", ".lock"})
    std::filesystem::remove(dir + "/" + stem + ext, ec);
}

/// Replays spool `stem` (its lock held by the caller) into `ledger`; the run's id there.
Result<std::int64_t> replay_one(Ledger& ledger, const std::string& dir, const std::string& stem,
                                std::int64_t target_run_id) {
  const std::string db = dir + "/" + stem + ".db";
  std::error_code ec;
  if (!std::filesystem::exists(db, ec)) {
    remove_spool_files(dir, stem);
    return std::int64_t{0};
  }
  std::int64_t id = 0;
  {
    GM_TRY(std::unique_ptr<Ledger> spool, Ledger::open(db));
    GM_TRY(std::vector<RunRecord> runs, spool->runs(RunFilter{}));
    for (const auto& r : runs) {
      GM_TRY(RunBundle b, load_bundle(*spool, r.id));
      GM_TRY(ImportOutcome done, ledger.import_run(b, spool_key(stem) + "#" + std::to_string(r.id),
                                                   runs.size() == 1 ? target_run_id : 0));
      id = done.run_id;
    }
  }
  remove_spool_files(dir, stem);
  return id;
}

}  // namespace

std::string default_spool_dir() {
  if (const char* p = std::getenv("GPUMETER_SPOOL_DIR"); p && *p) return p;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/gpumeter/spool";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/gpumeter/spool";
}

Result<std::size_t> replay_spool(Ledger& ledger, const std::string& spool_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(spool_dir, ec)) return std::size_t{0};
  std::vector<std::string> stems;
  for (const auto& e : std::filesystem::directory_iterator(spool_dir, ec))
    if (e.path().extension() == ".json") stems.push_back(e.path().stem().string());
  std::sort(stems.begin(), stems.end());
  std::size_t replayed = 0;
  for (const auto& stem : stems) {
    std::ifstream in(spool_dir + "/" + stem + ".json");
    std::stringstream text;
    text << in.rdbuf();
    // Written by gpumeter, but read back from disk (another version, a torn write): typed reads only.
    auto meta = util::json_parse(text.str(), spool_dir + "/" + stem + ".json");
    if (!meta || util::json_string(*meta, "ledger") != ledger.describe()) continue;
    const int fd = ::open((spool_dir + "/" + stem + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {  // still being written by a live gpumeter
      ::close(fd);
      continue;
    }
    auto id = replay_one(ledger, spool_dir, stem, util::json_int(*meta, "target_run_id").value_or(0));
    ::close(fd);
    if (!id) return id.error();
    ++replayed;
  }
  return replayed;
}

SpoolingLedger::SpoolingLedger(std::string location, std::string spool_dir)
    : location_(std::move(location)), spool_dir_(std::move(spool_dir)) {
  auto primary = Ledger::open(location_);
  if (primary) {
    primary_ = std::move(*primary);
    // Runs an earlier command left spooled go in now.
    if (auto n = replay_spool(*primary_, spool_dir_); n && *n > 0)
      notes_.push_back(
          fmt::format("replayed {} spooled run(s) into the ledger {}", *n, primary_->describe()));
  } else {
    start_spool(primary.error());
  }
}

SpoolingLedger::~SpoolingLedger() {
  spool_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::vector<std::string> SpoolingLedger::take_notes() {
  std::vector<std::string> out;
  out.swap(notes_);
  return out;
}

bool SpoolingLedger::start_spool(const Error& why) {
  primary_.reset();
  std::error_code ec;
  std::filesystem::create_directories(spool_dir_, ec);
  chmod(spool_dir_.c_str(), 0700);
  std::mt19937_64 rng(std::random_device{}());
  spool_name_ = fmt::format("run-{}-{}-{:08x}", now_unix_ms(), getpid(), rng() & 0xffffffffu);
  const std::string base = spool_dir_ + "/" + spool_name_;
  lock_fd_ = ::open((base + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ >= 0) (void)flock(lock_fd_, LOCK_EX);
  {
    std::ofstream meta(base + ".json", std::ios::trunc);
    meta << nlohmann::json{{"ledger", redact_location(location_)}, {"target_run_id", target_run_id_}}.dump();
  }
  auto spool = Ledger::open(base + ".db");
  if (!spool) {
    notes_.push_back("the ledger " + redact_location(location_) + " cannot be reached (" + why.message +
                     ") and the spool " + base + ".db cannot be written (" + spool.error().message +
                     "): this run is not recorded");
    remove_spool_files(spool_dir_, spool_name_);
    return false;
  }
  spool_ = std::move(*spool);
  notes_.push_back("the ledger cannot be reached (" + why.message + "): the run goes on, spooled to " + base +
                   ".db, and is replayed into the ledger when it is back");
  if (run_) {
    // The run as last written goes first; the rest of its rows follow it into the spool.
    RunRecord r = *run_;
    auto id = spool_->begin_run(r);
    if (!id) return false;
    spool_run_id_ = *id;
  }
  return true;
}

Ledger& SpoolingLedger::active() const {
  return primary_ ? *primary_ : *spool_;
}

std::int64_t SpoolingLedger::local_id(std::int64_t id) const {
  return spool_ && target_run_id_ != 0 && id == target_run_id_ ? spool_run_id_ : id;
}

template <class T>
std::vector<T> SpoolingLedger::to_local(const std::vector<T>& rows) const {
  std::vector<T> out = rows;
  for (auto& r : out) r.run_id = local_id(r.run_id);
  return out;
}

std::string SpoolingLedger::describe() const {
  return redact_location(location_);
}
std::string SpoolingLedger::backend() const {
  return primary_ ? primary_->backend() : "spool";
}
Result<int> SpoolingLedger::schema_version() const {
  if (!primary_ && !spool_) return make_error(ErrorKind::unavailable, "no ledger");
  return active().schema_version();
}

Result<std::int64_t> SpoolingLedger::begin_run(const RunRecord& run) {
  if (primary_) {
    if (auto id = primary_->begin_run(run)) {
      target_run_id_ = *id;
      run_ = run;
      run_->id = *id;
      return id;
    } else if (!start_spool(id.error())) {
      return id.error();
    }
  }
  if (!spool_) return make_error(ErrorKind::unavailable, "no ledger and no spool");
  GM_TRY(std::int64_t id, spool_->begin_run(run));
  spool_run_id_ = id;
  run_ = run;
  run_->id = id;
  return id;
}

Result<void> SpoolingLedger::update_run(const RunRecord& run) {
  run_ = run;
  if (primary_) {
    auto r = primary_->update_run(run);
    if (r || r.error().kind == ErrorKind::not_found) return r;
    if (!start_spool(r.error())) return r;
    return ok_result();  // the spool got the run as just written
  }
  if (!spool_) return make_error(ErrorKind::unavailable, "no ledger and no spool");
  RunRecord local = run;
  local.id = local_id(run.id);
  return spool_->update_run(local);
}

template <class F>
Result<void> SpoolingLedger::write_rows(F&& write) {
  if (primary_) {
    auto r = write(*primary_, false);
    if (r) return r;
    if (!start_spool(r.error())) return r;
  }
  if (!spool_) return make_error(ErrorKind::unavailable, "no ledger and no spool");
  return write(*spool_, true);
}

template <class T>
Result<void> SpoolingLedger::append_each(Result<void> (Ledger::*write)(const std::vector<T>&),
                                         const std::vector<T>& rows) {
  return write_rows(
      [&](Ledger& l, bool local) { return local ? (l.*write)(to_local(rows)) : (l.*write)(rows); });
}

Result<void> SpoolingLedger::append(const std::vector<SampleRecord>& samples,
                                    const std::vector<ProgressRecord>& progress,
                                    const std::vector<ActionRecord>& actions) {
  return write_rows([&](Ledger& l, bool local) {
    return local ? l.append(to_local(samples), to_local(progress), to_local(actions))
                 : l.append(samples, progress, actions);
  });
}

Result<void> SpoolingLedger::append_rollups(const std::vector<RollupRecord>& rollups) {
  return append_each(&Ledger::append_rollups, rollups);
}

Result<void> SpoolingLedger::append_inference(const std::vector<InferenceRecord>& records) {
  return append_each(&Ledger::append_inference, records);
}

Result<void> SpoolingLedger::append_cells(const std::vector<CellRecord>& cells) {
  return append_each(&Ledger::append_cells, cells);
}

Result<std::vector<CellRecord>> SpoolingLedger::cells(std::int64_t id) const {
  return active().cells(local_id(id));
}

std::int64_t SpoolingLedger::finish() {
  if (primary_) return target_run_id_;
  if (!spool_) return 0;
  spool_.reset();  // closes the spool file (its lock stays held: no other replay starts meanwhile)
  auto primary = Ledger::open(location_);
  if (!primary) {
    notes_.push_back("the ledger is still unreachable: the run stays spooled in " + spool_dir_ + "/" +
                     spool_name_ + ".db until the next gpumeter command reaches the ledger");
    return 0;
  }
  auto id = replay_one(**primary, spool_dir_, spool_name_, target_run_id_);
  if (!id) {
    notes_.push_back("the spooled run could not be replayed (" + id.error().message + "); it stays in " +
                     spool_dir_ + "/" + spool_name_ + ".db for the next gpumeter command");
    return 0;
  }
  notes_.push_back(fmt::format("the ledger is back: the spooled run is recorded there as run {}", *id));
  primary_ = std::move(*primary);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  target_run_id_ = *id;
  return *id;
}

// Reads and budget administration go to where the writes go.
Result<RunRecord> SpoolingLedger::run(std::int64_t id) const {
  return active().run(local_id(id));
}
Result<RunRecord> SpoolingLedger::last_run() const {
  return active().last_run();
}
Result<std::vector<RunRecord>> SpoolingLedger::runs(const RunFilter& filter) const {
  return active().runs(filter);
}
Result<std::vector<RunSummary>> SpoolingLedger::run_summaries(const RunFilter& filter) const {
  return active().run_summaries(filter);
}
Result<std::vector<SampleRecord>> SpoolingLedger::samples(std::int64_t id) const {
  return active().samples(local_id(id));
}
Result<std::vector<ProgressRecord>> SpoolingLedger::progress(std::int64_t id) const {
  return active().progress(local_id(id));
}
Result<std::vector<ActionRecord>> SpoolingLedger::actions(std::int64_t id) const {
  return active().actions(local_id(id));
}
Result<std::vector<RollupRecord>> SpoolingLedger::rollups(const RunFilter& filter) const {
  return active().rollups(filter);
}
Result<std::vector<InferenceRecord>> SpoolingLedger::inference(std::int64_t id) const {
  return active().inference(local_id(id));
}
Result<ImportOutcome> SpoolingLedger::import_run(const RunBundle& bundle, const std::string& key,
                                                 std::int64_t into) {
  return active().import_run(bundle, key, into);
}
Result<void> SpoolingLedger::set_budget(const BudgetRecord& b) {
  return active().set_budget(b);
}
Result<std::vector<BudgetRecord>> SpoolingLedger::budgets() const {
  if (!primary_) return make_error(ErrorKind::unavailable, "the ledger " + describe() + " cannot be reached");
  return primary_->budgets();
}
Result<void> SpoolingLedger::remove_budget(const std::string& selector) {
  return active().remove_budget(selector);
}
Result<SelectorSpend> SpoolingLedger::selector_spend(const std::string& key, const std::string& value,
                                                     std::int64_t since, std::int64_t exclude) const {
  if (!primary_) return make_error(ErrorKind::unavailable, "the ledger " + describe() + " cannot be reached");
  auto r = primary_->selector_spend(key, value, since, exclude);
  return r;
}

}  // namespace gm::store
