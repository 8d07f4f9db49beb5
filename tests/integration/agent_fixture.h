#pragma once
// Helpers for agent integration tests: a fake /proc tree with Docker, Kubernetes and Slurm processes, the
// real agent binary running in the background, and curl.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/fakes.h"
#include "support/support.h"

namespace gm::test {

inline void write_text(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

/// A node: /proc with a Kubernetes pod (PID base+1), a Docker container (base+2), a Slurm job (base+3)
/// and a bare process (base+4); kubelet logs naming the pod `ns`/`pod`.
inline void fake_node(const std::string& dir, unsigned base, const std::string& ns, const std::string& pod,
                      const std::string& job) {
  const std::string uid = "0d3c8b2e-1f4a-4b6c-9d8e-7a6b5c4d3e" + std::to_string(10 + base % 90);
  const std::string cid(64, static_cast<char>('a' + base % 6));
  std::string uid_ = uid;
  for (char& c : uid_)
    if (c == '-') c = '_';
  write_fake_process(dir + "/proc", base + 1, "python3",
                     "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ +
                         ".slice/cri-containerd-" + cid + ".scope\n");
  write_fake_process(dir + "/proc", base + 2, "python3",
                     "0::/system.slice/docker-" + std::string(64, 'f') + ".scope\n");
  write_fake_process(dir + "/proc", base + 3, "python3", "4:memory:/slurm/uid_0/job_" + job + "/step_0\n");
  write_fake_process(dir + "/proc", base + 4, "ollama", "0::/system.slice/ollama.service\n");
  std::filesystem::create_directories(dir + "/log/pods/" + ns + "_" + pod + "_" + uid + "/trainer");
  write_text(dir + "/log/containers/" + pod + "_" + ns + "_trainer-" + cid + ".log", "");
}

/// Owner-resolution flags for a node made by fake_node.
inline std::vector<std::string> node_flags(const std::string& dir) {
  return {"--proc-root", dir + "/proc", "--pod-log-root", dir + "/log/pods", "--container-log-root", dir + "/log/containers"};
}

/// The gpumeter binary (or another program) running in the background; killed at destruction.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& log_dir, const std::string& name) {
    out_ = log_dir + "/" + name + ".out";
    err_ = log_dir + "/" + name + ".err";
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      setpgid(0, 0);
      if (!freopen(out_.c_str(), "w", stdout) || !freopen(err_.c_str(), "w", stderr)) _exit(126);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  /// Waits for `pattern` (one capture group) in stderr; returns the capture or "" after `timeout_s`.
  std::string wait_stderr(const std::string& pattern, double timeout_s = 15) {
    const std::regex re(pattern);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      std::smatch m;
      const std::string text = read_file(err_);
      if (std::regex_search(text, m, re)) return m[1];
      if (!running()) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "";
  }
  /// True while the process has not exited.
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
      return false;
    }
    return true;
  }
  /// SIGTERM, then waits up to `timeout_s`; returns the exit code (or -1 if it had to be killed).
  int terminate(double timeout_s = 10) {
    if (pid_ > 0) kill(pid_, SIGTERM);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (running() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (running()) return -1;
    return exit_code_;
  }
  std::string stdout_text() const { return read_file(out_); }
  std::string stderr_text() const { return read_file(err_); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string out_, err_;
};

/// Starts the agent with a fake NVML scenario; returns its port via `port` (0 if it did not come up).
inline std::unique_ptr<Background> start_agent(const std::string& scenario, const std::string& home,
                                               const std::vector<std::string>& flags, int& port,
                                               const std::string& name = "agent") {
  std::vector<std::string> argv{gpumeter_binary(), "agent", "--listen", "127.0.0.1:0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto bg = std::make_unique<Background>(argv, fake_env(scenario, home), home, name);
  const std::string p = bg->wait_stderr(R"(serving https?://127\.0\.0\.1:(\d+)/metrics)");
  port = p.empty() ? 0 : std::stoi(p);
  return bg;
}

/// A sanitizer report (AddressSanitizer, LeakSanitizer, UBSan's "runtime error:") in `text`, from a little before
/// its first marker; "" when there is none. Under `make test-asan` the agent binary is built with sanitizers.
inline std::string sanitizer_report(const std::string& text) {
  for (const char* marker : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"}) {
    const auto pos = text.find(marker);
    if (pos != std::string::npos) return text.substr(pos > 200 ? pos - 200 : 0, 8000);
  }
  return "";
}

/// curl with a time bound; extra arguments before the URL.
inline CmdResult curl(const std::string& url, const std::vector<std::string>& extra = {}, double max_s = 5) {
  std::vector<std::string> argv{"curl", "-sS", "--max-time", std::to_string(max_s)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  return run_command(argv, {}, std::nullopt, max_s + 5);
}

/// The value of the first exposition line starting with `prefix` (NaN if none).
inline double metric(const std::string& text, const std::string& prefix) {
  std::size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') {
      const auto eol = text.find('\n', pos);
      const std::string line = text.substr(pos, eol - pos);
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    ++pos;
  }
  return std::nan("");
}

}  // namespace gm::test
