#include "support/support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace gm::test {

CmdResult run_command(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                      const std::optional<std::string>& stdin_text, double timeout_s) {
  CmdResult r;
  int out_pipe[2], err_pipe[2], in_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC) || pipe2(in_pipe, O_CLOEXEC))
    throw std::runtime_error("pipe failed");
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    setpgid(0, 0);
    for (const auto& [k, v] : env) {
      if (v == "\x01unset")
        unsetenv(k.c_str());
      else
        setenv(k.c_str(), v.c_str(), 1);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(in_pipe[0]);
  if (stdin_text) {
    // small inputs only; a large write could block
    ssize_t ignored = write(in_pipe[1], stdin_text->data(), stdin_text->size());
    (void)ignored;
  }
  close(in_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > timeout_s && !r.timed_out) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    if (poll(fds, 2, 100) < 0 && errno != EINTR) break;
    for (auto& f : fds) {
      if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(f.fd, buf, sizeof buf);
      if (n <= 0) {
        close(f.fd);
        f.fd = -1;
        --open_fds;
      } else {
        (&f == &fds[0] ? r.out : r.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.exit_code = 128 + WTERMSIG(status);
  return r;
}

CmdResult run_gpumeter(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                       const std::optional<std::string>& stdin_text, double timeout_s) {
  std::vector<std::string> argv{gpumeter_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, env, stdin_text, timeout_s);
}

std::map<std::string, std::string> fake_env(const std::string& scenario_path, const std::string& home_dir) {
  return {{"GPUMETER_NVML_LIBRARY", fake_nvml_library()}, {"FAKE_NVML_SCENARIO", scenario_path},
          {"GPUMETER_LEDGER", home_dir + "/ledger.db"},   {"XDG_CONFIG_HOME", home_dir + "/config"},
          {"XDG_DATA_HOME", home_dir + "/data"},          {"HOME", home_dir}};
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/gpumeter-test-XXXXXX";
  const char* p = mkdtemp(tmpl);
  if (!p) throw std::runtime_error("mkdtemp failed");
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& content) const {
  const std::string full = path_ + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(full).parent_path());
  std::ofstream(full, std::ios::binary) << content;
  return full;
}

std::string gpumeter_binary() {
  return GPUMETER_BINARY;
}
std::string fake_nvml_library() {
  return GPUMETER_FAKE_NVML;
}
std::string missing_build_output() {
  std::string missing;
  for (const auto& [path, what] : {std::pair{gpumeter_binary(), "the gpumeter binary"},
                                   std::pair{fake_nvml_library(), "the fake NVML library"}})
    if (path.empty() || !std::filesystem::exists(path))
      missing += std::string(missing.empty() ? "" : "; ") + what + " (" + path +
                 ") is missing: build the gpumeter, fake_nvml and gpumeter_tests targets together";
  return missing;
}
std::string source_dir() {
  return GPUMETER_SOURCE_DIR;
}
std::string sample_traces_dir() {
  return source_dir() + "/tests/data/sample_traces";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string one_gpu_scenario(const std::string& comm, int util) {
  nlohmann::json proc = {{"comm", comm}, {"mem_mib", 60500}, {"sm_util", util}};
  nlohmann::json j = {
      {"driver_version", "580.95.05"},
      {"devices",
       {{{"name", "NVIDIA H100 80GB HBM3"},
         {"uuid", "GPU-11111111-2222-3333-4444-555555555555"},
         {"pci_bus_id", "00000000:18:00.0"},
         {"memory_total_mib", 81559},
         {"power_limit_w", 700},
         {"energy_counter", true},
         {"mig", false},
         {"timeline",
          {{{"t", 0},
            {"util", util},
            {"mem_used_mib", 61000},
            {"power_w", util > 5 ? 650 : 70},
            {"temp_c", 60},
            {"processes", comm.empty() ? nlohmann::json::array() : nlohmann::json::array({proc})}}}}}}}};
  return j.dump();
}

}  // namespace gm::test
