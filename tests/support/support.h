#pragma once
// Test helpers: run the real gpumeter binary, temporary directories, paths of the build.
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gm::test {

/// Outcome of running a command.
struct CmdResult {
  int exit_code = -1;  ///< exit status, or 128+signal
  std::string out;     ///< stdout bytes
  std::string err;     ///< stderr bytes
  double wall_s = 0;
  bool timed_out = false;
};

/// Runs `argv` (argv[0] is a path) with extra environment `env` (a value of "\x01unset" removes a variable),
/// optional stdin text, killing it after `timeout_s`.
CmdResult run_command(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env = {},
                      const std::optional<std::string>& stdin_text = std::nullopt, double timeout_s = 120);

/// Runs the built gpumeter binary with `args`.
CmdResult run_gpumeter(const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env = {},
                       const std::optional<std::string>& stdin_text = std::nullopt, double timeout_s = 120);

/// Environment that points gpumeter at the fake NVML with this scenario file, a private ledger and config
/// dir.
std::map<std::string, std::string> fake_env(const std::string& scenario_path, const std::string& home_dir);

/// A fake-NVML scenario (DESIGN §6): one H100 whose processes are every live process named `comm` (none
/// when `comm` is empty), at utilization `util` throughout.
std::string one_gpu_scenario(const std::string& comm, int util);

/// A fresh directory under /tmp, removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// Writes `content` to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

/// "" when the gpumeter binary and the fake NVML library are both built, else a sentence naming what is
/// missing.
std::string missing_build_output();

/// Fails the calling test (never skips it) unless the gpumeter binary and the fake NVML library are built:
/// they are built with the tests, so a missing one is a broken build. Use in a test body or in SetUp().
#define GM_ASSERT_BUILT() ASSERT_EQ(::gm::test::missing_build_output(), "")

/// Path of the gpumeter binary under test.
std::string gpumeter_binary();
/// Path of the fake NVML library (build/fake_nvml/libnvidia-ml.so.1).
std::string fake_nvml_library();
/// The source tree root.
std::string source_dir();
/// The real profiler traces of the repository (tests/data/sample_traces, licences in its README.md).
std::string sample_traces_dir();
/// Reads a whole file ("" if missing).
std::string read_file(const std::string& path);

}  // namespace gm::test
