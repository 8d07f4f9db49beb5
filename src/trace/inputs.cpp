// Inputs of `gpumeter trace`: files recognised by content, folders walked recursively and grouped by the
// folder holding the files, analysed in parallel.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "trace/internal.h"
#include "trace/io.h"

namespace gm::trace {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kSniffBytes = 64 * 1024;

/// A parse's outcome: with options.partial a damaged trace keeps what parsed and `fa` says so.
Result<void> keep_partial(Result<void> parsed, const detail::RawTrace& raw, const Options& options,
                          FileAnalysis& fa) {
  if (!parsed) {
    if (!options.partial || !raw.has_trace_events) return parsed.error();
    fa.partial = true;
    fa.partial_error = parsed.error().message;
  }
  return {};
}

/// Parses a JSON buffer into `raw` (keep_partial).
Result<void> parse_json_into(const std::string& name, char* data, std::size_t len, detail::RawTrace& raw,
                             const Options& options, FileAnalysis& fa) {
  return keep_partial(detail::parse_trace_repairing(name, data, len, raw, options), raw, options, fa);
}

/// Parses a buffer of any supported format (by content) into `raw`; `what` says what it is otherwise.
Result<void> parse_any(const std::string& name, char* data, std::size_t len, detail::RawTrace& raw,
                       const Options& options, FileAnalysis& fa) {
  const auto s = detail::sniff(std::string_view(data, len), true);
  switch (s.format) {
    case detail::Format::json:
      return parse_json_into(name, data, len, raw, options, fa);
    case detail::Format::perfetto:
      return keep_partial(detail::parse_perfetto(name, data, len, raw, options), raw, options, fa);
    case detail::Format::unknown:
      raw.not_a_trace = s.what;
      return {};
  }
  return {};
}

/// The analysis of a parsed trace (its spans are sorted first, once for every analysis).
FileAnalysis finish(detail::RawTrace& raw, FileAnalysis fa) {
  fa.rank = raw.rank;
  fa.event_count = raw.event_count;
  fa.skipped_events = raw.skipped_events;
  if (!raw.has_trace_events) {
    fa.skipped = raw.not_a_trace.empty() ? std::string("not a trace") : raw.not_a_trace;
    return fa;
  }
  fa.format = raw.format;
  detail::sort_spans(raw);
  fa.devices = detail::analyze(raw);
  fa.host = detail::analyze_host(raw);
  detail::add_attention(raw, fa.devices, fa.host);
  fa.collectives = detail::collective_calls(raw, fa.collective_kernels_without_metadata);
  return fa;
}

std::string parent_of(const std::string& path) {
  auto parent = fs::path(path).parent_path().string();
  return parent.empty() ? std::string(".") : parent;
}

/// One file to analyse.
struct Job {
  std::string path;
  std::string group;
  bool named = false;  // given on the command line (not found in a folder)
};

/// Walks a folder recursively (following symlinks, each real folder once); files in path order.
void walk(const std::string& root, std::vector<Job>& jobs, std::vector<std::string>& problems) {
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<std::string> stack{root};
  std::vector<Job> found;
  while (!stack.empty()) {
    const std::string dir = stack.back();
    stack.pop_back();
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      problems.push_back(fmt::format("{}: cannot read: {}", dir, std::strerror(errno)));
      continue;
    }
    if (!seen.insert({st.st_dev, st.st_ino}).second) {
      problems.push_back(
          fmt::format("{}: a folder already read (symlink loop or second link), not read again", dir));
      continue;
    }
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) {
      problems.push_back(fmt::format("{}: cannot list folder: {}", dir, ec.message()));
      continue;
    }
    std::vector<std::string> subdirs;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const std::string p = it->path().string();
      std::error_code e2;
      const auto status = fs::status(it->path(), e2);  // follows symlinks
      if (e2) {
        problems.push_back(fmt::format("{}: cannot read: {}", p, e2.message()));
        continue;
      }
      if (fs::is_directory(status))
        subdirs.push_back(p);
      else if (fs::is_regular_file(status))
        found.push_back(Job{p, dir, false});
    }
    if (ec) problems.push_back(fmt::format("{}: cannot list folder: {}", dir, ec.message()));
    std::sort(subdirs.rbegin(), subdirs.rend());
    for (auto& d : subdirs) stack.push_back(std::move(d));
  }
  std::stable_sort(found.begin(), found.end(), [](const Job& a, const Job& b) {
    return a.group != b.group ? a.group < b.group : a.path < b.path;
  });
  jobs.insert(jobs.end(), found.begin(), found.end());
}

/// Analyses one job: content detection on the head of the file first, so that large files that are not
/// traces (checkpoints, images) are never read whole.
Result<FileAnalysis> analyze_job(const Job& job, const Options& options) {
  detail::PaddedBuffer head;
  bool more = false;
  GM_TRY_VOID(detail::load_head(job.path, kSniffBytes, head, more));
  const auto s = detail::sniff(std::string_view(head.data(), head.size()), !more);
  if (s.format == detail::Format::unknown) {
    FileAnalysis fa;
    fa.file = job.path;
    fa.group = job.group;
    fa.skipped = s.what;
    return fa;
  }
  GM_TRY(FileAnalysis fa, analyze_file(job.path, options));
  fa.group = job.group;
  return fa;
}

}  // namespace

Result<FileAnalysis> analyze_buffer(const std::string& name, std::string_view content,
                                    const Options& options) {
  detail::PaddedBuffer buf;
  if (!buf.reserve(content.size())) return make_error(name + ": out of memory");
  if (!content.empty()) std::memcpy(buf.data(), content.data(), content.size());
  buf.set_size(content.size());
  detail::RawTrace raw;
  FileAnalysis fa;
  fa.file = name;
  fa.group = parent_of(name);
  fa.bytes = static_cast<std::int64_t>(content.size());
  GM_TRY_VOID(parse_any(name, buf.data(), buf.size(), raw, options, fa));
  return finish(raw, std::move(fa));
}

Result<FileAnalysis> analyze_file(const std::string& path, const Options& options) {
  FileAnalysis fa;
  fa.file = path;
  fa.group = parent_of(path);
  detail::RawTrace raw;
  // JSON traces window by window (bounded memory); anything else, or a JSON file the windowed reader does
  // not take to its end (damage, --partial), through the whole-file reader.
  GM_TRY(const bool windowed,
         detail::parse_json_windowed(
             path, raw, options, options.window_bytes != 0 ? options.window_bytes : kDefaultWindowBytes,
             options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency()),
             fa.bytes));
  if (!windowed) {
    raw = detail::RawTrace{};
    detail::PaddedBuffer buf;
    GM_TRY_VOID(detail::load(path, buf));
    fa.bytes = static_cast<std::int64_t>(buf.size());
    GM_TRY_VOID(parse_any(path, buf.data(), buf.size(), raw, options, fa));
  }  // the file's buffer is released before the analyses
  if (options.progress) options.progress(fa.bytes, fa.bytes);
  return finish(raw, std::move(fa));
}

Result<TraceSet> analyze_inputs(const std::vector<std::string>& paths, const Options& options) {
  TraceSet set;
  std::vector<Job> jobs;
  struct Folder {
    std::string path;
    std::size_t first, last;  // its jobs
  };
  std::vector<Folder> folders;
  for (const auto& p : paths) {
    std::error_code ec;
    const auto status = fs::status(p, ec);
    if (ec || !fs::exists(status)) {
      if (fs::is_symlink(fs::symlink_status(p, ec)))
        return make_error(ErrorKind::not_found, fmt::format("{}: a symlink to nothing (dangling)", p));
      return make_error(ErrorKind::not_found, fmt::format("{}: no such file or folder", p));
    }
    if (fs::is_directory(status)) {
      const std::size_t first = jobs.size();
      walk(p, jobs, set.problems);
      folders.push_back(Folder{p, first, jobs.size()});
    } else {
      jobs.push_back(Job{p, parent_of(p), true});
    }
  }
  std::vector<std::optional<Result<FileAnalysis>>> results(jobs.size());
  unsigned workers =
      options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  workers = static_cast<unsigned>(std::min<std::size_t>(workers, jobs.size()));
  // Threads not needed for whole files parse windows of the files (same results with any split).
  Options file_options = options;
  file_options.threads = std::max(
      1u, (options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency())) /
              std::max(1u, workers));
  std::atomic<std::size_t> next{0};
  auto work = [&]() {
    for (std::size_t i = next++; i < jobs.size(); i = next++)
      results[i].emplace(analyze_job(jobs[i], file_options));
  };
  std::vector<std::thread> pool;
  for (unsigned w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  std::vector<bool> kept(jobs.size(), false);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto& r = *results[i];
    if (!r) {
      // An entry of a folder that cannot be opened is reported; a damaged trace, or a named file that
      // cannot be read, is an error.
      const bool unreadable = r.error().message.find(": cannot open: ") != std::string::npos;
      if (!jobs[i].named && unreadable) {
        set.problems.push_back(r.error().message);
        continue;
      }
      return r.error();
    }
    if (jobs[i].named && r->skipped)
      set.errors.push_back(fmt::format("{}: not a trace: {}", jobs[i].path, *r->skipped));
    kept[i] = !r->skipped.has_value();
    set.files.push_back(std::move(r.value()));
  }
  for (const auto& f : folders) {
    std::size_t traces = 0;
    for (std::size_t i = f.first; i < f.last; ++i) traces += kept[i] ? 1 : 0;
    if (traces == 0)
      set.errors.push_back(
          f.last == f.first
              ? fmt::format("{}: no files in this folder", f.path)
              : fmt::format("{}: nothing to analyse: none of the {} files under this folder is a "
                            "profiler trace",
                            f.path, f.last - f.first));
  }
  return set;
}

Result<std::vector<FileAnalysis>> analyze_paths(const std::vector<std::string>& paths,
                                                const Options& options) {
  GM_TRY(TraceSet set, analyze_inputs(paths, options));
  return std::move(set.files);
}

}  // namespace gm::trace
