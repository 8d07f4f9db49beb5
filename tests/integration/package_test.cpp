// The Debian package and the OCI image, installed and run in a clean Debian 12 root filesystem made by
// debootstrap from the package mirror (scripts/debian_rootfs.sh, cached in the build directory): README's
// "Getting started" blocks are extracted from README.md and run line by line, as written. Label `package`
// (suites ending in PackageTest); needs root (chroot), as `make test` on the CI machine has.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/support.h"

namespace gm::test {
namespace {

namespace fs = std::filesystem;

const char* const kPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string binary_dir() {
  return fs::path(gpumeter_binary()).parent_path().string();
}

/// The lines of README.md's ```sh block after `<!-- getting-started: NAME -->`.
std::vector<std::string> getting_started(const std::string& name) {
  const std::string readme = read_file(source_dir() + "/README.md");
  const std::string marker = "<!-- getting-started: " + name + " -->";
  const auto at = readme.find(marker);
  if (at == std::string::npos) return {};
  const auto open = readme.find("```sh\n", at);
  const auto close = readme.find("\n```", open);
  if (open == std::string::npos || close == std::string::npos) return {};
  std::vector<std::string> lines;
  std::istringstream in(readme.substr(open + 6, close - open - 6));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

/// Builds the .deb from the build directory's CPack configuration into `dir`; returns its path.
std::string build_deb(const std::string& dir) {
  auto r = run_command({"/bin/sh", "-c", "cd '" + binary_dir() + "' && cpack -G DEB -B '" + dir + "'"}, {},
                       std::nullopt, 300);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".deb") return e.path().string();
  ADD_FAILURE() << "cpack wrote no .deb into " << dir;
  return "";
}

/// A fresh Debian 12 root filesystem at dir/rootfs (package lists updated).
std::string make_rootfs(const std::string& dir) {
  const std::string root = dir + "/rootfs";
  auto r = run_command({source_dir() + "/scripts/debian_rootfs.sh", binary_dir() + "/debian-cache", root}, {},
                       std::nullopt, 900);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return root;
}

/// Runs a shell line inside the root filesystem as root, in /root, with a clean login-like environment.
CmdResult in_root(const std::string& root, const std::string& line, double timeout_s = 300) {
  return run_command({"/usr/sbin/chroot", root, "/usr/bin/env", "-i", "HOME=/root", kPath, "LANG=C.UTF-8",
                      "DEBIAN_FRONTEND=noninteractive", "/bin/sh", "-c", "cd /root && " + line},
                     {}, std::nullopt, timeout_s);
}

void copy_into(const std::string& file, const std::string& dest_dir) {
  fs::copy_file(file, dest_dir + "/" + fs::path(file).filename().string(),
                fs::copy_options::overwrite_existing);
}

TEST(DebPackageTest, ControlDependenciesLayoutAndLintian) {
  TempDir dir;
  const std::string deb = build_deb(dir.path());
  ASSERT_FALSE(deb.empty());
  EXPECT_EQ(fs::path(deb).filename(), "gpumeter_" GPUMETER_VERSION "_amd64.deb");
  auto info = run_command({"/usr/bin/dpkg-deb", "-I", deb});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  // Depends computed by dpkg-shlibdeps from the binary's shared libraries, with versions.
  EXPECT_TRUE(std::regex_search(info.out, std::regex(R"(Depends: .*libc6 \(>= 2\.\d+\))"))) << info.out;
  EXPECT_NE(info.out.find("libsqlite3-0 (>= "), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("libssl3 (>= "), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("postinst"), std::string::npos);
  auto files = run_command({"/usr/bin/dpkg-deb", "-c", deb});
  ASSERT_EQ(files.exit_code, 0) << files.err;
  for (const char* path :
       {"./usr/bin/gpumeter", "./usr/share/man/man1/gpumeter.1.gz", "./usr/share/man/man1/gpumeter-run.1.gz",
        "./usr/share/man/man1/gpumeter-trace.1.gz", "./usr/share/bash-completion/completions/gpumeter",
        "./usr/share/zsh/vendor-completions/_gpumeter",
        "./usr/lib/python3/dist-packages/gpumeter/__init__.py",
        "./usr/share/gpumeter/deploy/kubernetes/gpumeter-daemonset.yaml",
        "./usr/share/gpumeter/deploy/prometheus/gpumeter-rules.yml",
        "./lib/systemd/system/gpumeter-agent.service", "./etc/gpumeter/config.toml",
        "./etc/default/gpumeter-agent", "./usr/lib/gpumeter/gpumeter-epilog.sh",
        "./usr/share/doc/gpumeter/copyright", "./usr/share/doc/gpumeter/changelog.gz",
        "./usr/share/gpumeter/examples/alexnet.pt.trace.json.gz"})
    EXPECT_NE(files.out.find(std::string(path) + "\n"), std::string::npos) << path;
  // The fake NVML is a test library: never in the package.
  EXPECT_EQ(files.out.find("libnvidia-ml"), std::string::npos);
  EXPECT_EQ(files.out.find("__pycache__"), std::string::npos);
  auto lint =
      run_command({"/usr/bin/lintian", "--pedantic", "--allow-root", "--fail-on", "error,warning,info", deb},
                  {}, std::nullopt, 300);
  EXPECT_EQ(lint.exit_code, 0) << "lintian:\n" << lint.out << lint.err;
  EXPECT_EQ(lint.out, "");
}

TEST(DebPackageTest, GettingStartedOnARentedGpuBoxInACleanDebian12ThenPurge) {
  TempDir dir;
  const std::string deb = build_deb(dir.path() + "/deb");
  ASSERT_FALSE(deb.empty());
  const std::string root = make_rootfs(dir.path());
  ASSERT_TRUE(fs::exists(root + "/etc/debian_version"));
  copy_into(deb, root + "/root");
  // Stand-in for the user's training script (the README line names it).
  {
    std::ofstream train(root + "/root/train.py");
    train << "import time\nfor step in range(1, 6):\n    print(f'step {step}/5 loss {1.0 / step:.3f}', "
             "flush=True)\n    time.sleep(0.2)\n";
  }
  const auto lines = getting_started("box");
  ASSERT_GE(lines.size(), 4u) << "README.md has no getting-started: box block";
  for (const auto& line : lines) {
    SCOPED_TRACE(line);
    auto r = in_root(root, line);
    if (line.starts_with("gpumeter doctor")) {
      // No GPU here: the documented exit code 3 and a message that says so.
      EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
      EXPECT_NE(r.out.find("NVML             NOT AVAILABLE"), std::string::npos) << r.out;
      continue;
    }
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    if (line.starts_with("gpumeter plan")) {
      EXPECT_NE(r.out.find("H100"), std::string::npos) << r.out;
    }
    if (line.starts_with("gpumeter run")) {
      EXPECT_NE(r.out.find("step 5/5"), std::string::npos) << r.out;
    }
    if (line.starts_with("gpumeter report")) {
      EXPECT_NE(r.out.find("succeeded"), std::string::npos) << r.out;
    }
    if (line.starts_with("gpumeter trace")) {
      EXPECT_NE(r.out.find("input_bound"), std::string::npos) << r.out;
    }
  }
  // What the package installed works together: version, help, man page, completion, the Python client.
  auto version = in_root(root, "gpumeter --version");
  EXPECT_EQ(version.out, "gpumeter " GPUMETER_VERSION "\n");
  EXPECT_EQ(
      in_root(root,
              "test -s /usr/share/man/man1/gpumeter-run.1.gz && zcat /usr/share/man/man1/gpumeter-run.1.gz "
              "| grep -q -- 'budget'")
          .exit_code,
      0);
  auto py = in_root(root, "python3 -c 'import gpumeter, gpumeter.integrations; print(gpumeter.__name__)'");
  EXPECT_EQ(py.exit_code, 0) << py.err;
  auto comp = in_root(root,
                      "bash -c '. /usr/share/bash-completion/completions/gpumeter; "
                      "COMP_WORDS=(gpumeter tr); COMP_CWORD=1; _gpumeter; echo ${COMPREPLY[*]}; "
                      "COMP_WORDS=(gpumeter run --bud); COMP_CWORD=2; _gpumeter; echo ${COMPREPLY[*]}'");
  EXPECT_EQ(comp.out, "trace\n--budget\n") << comp.err;
  ASSERT_TRUE(fs::exists(root + "/root/.local/share/gpumeter/ledger.db"));

  // Purge: every file of the package and the agent's state are gone; the user's ledger stays (documented).
  auto listed = in_root(root, "dpkg -L gpumeter");
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  fs::create_directories(root + "/var/lib/gpumeter");
  { std::ofstream(root + "/var/lib/gpumeter/agent-state.json") << "{}"; }
  auto purge = in_root(root, "apt-get purge -y -q gpumeter");
  ASSERT_EQ(purge.exit_code, 0) << purge.out << purge.err;
  std::istringstream in(listed.out);
  for (std::string path; std::getline(in, path);) {
    if (path.empty() || path == "/." || fs::is_directory(root + path)) continue;
    EXPECT_FALSE(fs::exists(fs::symlink_status(root + path))) << path << " left after purge";
  }
  for (const char* path :
       {"/etc/gpumeter", "/etc/default/gpumeter-agent", "/var/lib/gpumeter", "/usr/share/gpumeter",
        "/usr/lib/python3/dist-packages/gpumeter", "/lib/systemd/system/gpumeter-agent.service"})
    EXPECT_FALSE(fs::exists(root + path)) << path << " left after purge";
  EXPECT_TRUE(fs::exists(root + "/root/.local/share/gpumeter/ledger.db"))
      << "the ledger must survive a purge";
}

TEST(DebPackageTest, GettingStartedOnASlurmNodeRegistersTheAgentAndTheProlog) {
  TempDir dir;
  const std::string deb = build_deb(dir.path() + "/deb");
  ASSERT_FALSE(deb.empty());
  const std::string root = make_rootfs(dir.path());
  copy_into(deb, root + "/root");
  // A node's init system and its existing slurm.conf (stand-in content: Slurm itself is tested elsewhere).
  auto systemd = in_root(root, "apt-get install -y -q --no-install-recommends systemd", 600);
  ASSERT_EQ(systemd.exit_code, 0) << systemd.out << systemd.err;
  fs::create_directories(root + "/etc/slurm");
  { std::ofstream(root + "/etc/slurm/slurm.conf") << "ClusterName=test\n"; }
  const auto lines = getting_started("slurm");
  ASSERT_GE(lines.size(), 3u) << "README.md has no getting-started: slurm block";
  for (const auto& line : lines) {
    SCOPED_TRACE(line);
    auto r = in_root(root, line);
    if (line.starts_with("systemctl enable --now")) {
      // A chroot has no running systemd: the unit is enabled, starting it is refused with this message.
      EXPECT_TRUE(r.exit_code == 0 || r.err.find("not been booted with systemd") != std::string::npos)
          << r.err;
      EXPECT_TRUE(
          fs::is_symlink(root + "/etc/systemd/system/multi-user.target.wants/gpumeter-agent.service"));
      continue;
    }
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  // systemd itself accepts the unit with the Slurm drop-in, and the drop-in takes effect.
  auto verify = in_root(root, "systemd-analyze verify --man=no gpumeter-agent.service");
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_NE(read_file(root + "/lib/systemd/system/gpumeter-agent.service").find("ProtectSystem=strict"),
            std::string::npos);
  EXPECT_NE(read_file(root + "/etc/systemd/system/gpumeter-agent.service.d/slurm.conf").find("User=root"),
            std::string::npos);
  const std::string conf = read_file(root + "/etc/slurm/slurm.conf");
  EXPECT_NE(conf.find("Prolog=/usr/lib/gpumeter/gpumeter-prolog.sh"), std::string::npos) << conf;
  EXPECT_NE(conf.find("Epilog=/usr/lib/gpumeter/gpumeter-epilog.sh"), std::string::npos) << conf;
  EXPECT_EQ(
      in_root(root,
              "test -x /usr/lib/gpumeter/gpumeter-prolog.sh && test -x /usr/lib/gpumeter/gpumeter-epilog.sh")
          .exit_code,
      0);
  // The epilog never fails a job, even with no agent running on the node.
  auto epilog = in_root(root, "SLURM_JOB_ID=7 SLURM_JOB_USER=alice /usr/lib/gpumeter/gpumeter-epilog.sh", 60);
  EXPECT_EQ(epilog.exit_code, 0) << epilog.err;
}

}  // namespace
}  // namespace gm::test
