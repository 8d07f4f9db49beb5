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

#include "integration/agent_fixture.h"
#include "integration/slurm_fixture.h"
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
        "./lib/systemd/system/gpumeter-prices-update.service",
        "./lib/systemd/system/gpumeter-prices-update.timer", "./etc/default/gpumeter-agent",
        "./usr/lib/gpumeter/gpumeter-epilog.sh", "./usr/share/doc/gpumeter/copyright",
        "./usr/share/doc/gpumeter/changelog.gz", "./usr/share/gpumeter/examples/alexnet.pt.trace.json.gz"})
    EXPECT_NE(files.out.find(std::string(path) + "\n"), std::string::npos) << path;
  // The fake NVML is a test library: never in the package.
  EXPECT_EQ(files.out.find("libnvidia-ml"), std::string::npos);
  EXPECT_EQ(files.out.find("__pycache__"), std::string::npos);
  auto lint =
      run_command({"/usr/bin/lintian", "--pedantic", "--allow-root", "--fail-on", "error,warning,info", deb},
                  {}, std::nullopt, 300);
  EXPECT_EQ(lint.exit_code, 0) << "lintian:\n" << lint.out << lint.err;
  EXPECT_EQ(lint.out, "");
  // The zsh completion is valid zsh, and every man page renders.
  ASSERT_EQ(run_command({"/usr/bin/dpkg-deb", "-x", deb, dir.path() + "/x"}).exit_code, 0);
  auto zsh =
      run_command({"/usr/bin/zsh", "-n", dir.path() + "/x/usr/share/zsh/vendor-completions/_gpumeter"});
  EXPECT_EQ(zsh.exit_code, 0) << zsh.err;
  for (const auto& e : fs::directory_iterator(dir.path() + "/x/usr/share/man/man1")) {
    auto page = run_command({"/bin/sh", "-c", "zcat '" + e.path().string() + "' | groff -man -Tutf8 -ww -z"});
    EXPECT_EQ(page.exit_code, 0) << e.path() << page.err;
    EXPECT_EQ(page.err, "") << e.path();
  }
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
      // The AlexNet example's GPU waits on a host inside aten::conv2d (first-call set-up): dispatch-bound,
      // not input-bound (issue 38 changed this expectation).
      EXPECT_NE(r.out.find("dispatch_bound"), std::string::npos) << r.out;
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
  // The daily price fetch is shipped, valid and disabled until its timer is enabled.
  auto verify_prices = in_root(
      root, "systemd-analyze verify --man=no gpumeter-prices-update.service gpumeter-prices-update.timer");
  EXPECT_EQ(verify_prices.exit_code, 0) << verify_prices.out << verify_prices.err;
  EXPECT_FALSE(fs::exists(root + "/etc/systemd/system/timers.target.wants/gpumeter-prices-update.timer"));
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

/// Runs `argv` inside the unpacked image's root filesystem as uid:gid, with a clean environment plus `env`.
CmdResult in_image(const std::string& rootfs, const std::string& user, const std::vector<std::string>& env,
                   const std::vector<std::string>& argv) {
  std::vector<std::string> cmd = {
      "/usr/sbin/chroot", "--userspec=" + user, rootfs, "/usr/bin/env", "-i", kPath};
  cmd.insert(cmd.end(), env.begin(), env.end());
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return run_command(cmd, {}, std::nullopt, 120);
}

TEST(OciImagePackageTest, ImageRunsTheAgentAsItsUserAndGettingStartedPushesIt) {
  TempDir dir;
  const std::string layout = dir.path() + "/gpumeter-oci";
  auto built =
      run_command({source_dir() + "/scripts/build_image.sh", binary_dir(), layout}, {}, std::nullopt, 900);
  ASSERT_EQ(built.exit_code, 0) << built.out << built.err;
  auto unpack = run_command(
      {"/usr/bin/umoci", "unpack", "--image", layout + ":" GPUMETER_VERSION, dir.path() + "/bundle"});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  const auto config = nlohmann::json::parse(read_file(dir.path() + "/bundle/config.json"));
  const auto& process = config["process"];
  ASSERT_EQ(process["user"]["uid"], 65532);
  ASSERT_EQ(process["user"]["gid"], 65532);
  ASSERT_GE(process["args"].size(), 2u);
  EXPECT_EQ(process["args"][0], "/usr/bin/gpumeter");
  EXPECT_EQ(process["args"][1], "agent");
  const std::string rootfs = dir.path() + "/bundle/rootfs";
  const std::string user = std::to_string(process["user"]["uid"].get<int>()) + ":" +
                           std::to_string(process["user"]["gid"].get<int>());
  auto version = in_image(rootfs, user, {}, {"/usr/bin/gpumeter", "--version"});
  EXPECT_EQ(version.out, "gpumeter " GPUMETER_VERSION "\n") << version.err;
  auto doctor = in_image(rootfs, user, {}, {"/usr/bin/gpumeter", "doctor"});
  EXPECT_EQ(doctor.exit_code, 3) << doctor.out << doctor.err;
  auto plan =
      in_image(rootfs, user, {}, {"/usr/bin/gpumeter", "plan", "--model", "llama-3-8b", "--task", "lora"});
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  auto trace = in_image(rootfs, user, {},
                        {"/usr/bin/gpumeter", "trace",
                         "/usr/share/gpumeter/examples/alexnet.pt.trace.json.gz", "--price", "2.5"});
  EXPECT_EQ(trace.exit_code, 0) << trace.err;
  EXPECT_NE(trace.out.find("dispatch_bound"), std::string::npos) << trace.out;  // issue 38: not input
  // The entrypoint's agent as the image's user, with the fake NVML where the NVIDIA container runtime puts
  // the driver's library (a stand-in for a GPU node): metrics, and its state in the image's volume.
  fs::copy_file(fake_nvml_library(), rootfs + "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  { std::ofstream(rootfs + "/tmp/scenario.json") << one_gpu_scenario("python3", 70); }
  std::vector<std::string> agent(process["args"].begin(), process["args"].end());
  agent.insert(agent.end(),
               {"--once", "--interval", "200ms", "--state", "/var/lib/gpumeter/agent-state.json"});
  auto once = in_image(rootfs, user, {"FAKE_NVML_SCENARIO=/tmp/scenario.json"}, agent);
  EXPECT_EQ(once.exit_code, 0) << once.err;
  EXPECT_NE(once.out.find("gpumeter_gpu_price_usd_per_hour{"), std::string::npos) << once.out;
  EXPECT_TRUE(fs::exists(rootfs + "/var/lib/gpumeter/agent-state.json")) << once.err;

  // README's Kubernetes lines, run as an unprivileged user in a folder holding the release's image layout and
  // DaemonSet: skopeo pushes to a real registry (docker-registry on loopback; the user's registries.conf
  // marks it plain HTTP) and kubectl receives the DaemonSet. kubectl is a stand-in (no cluster here) that
  // keeps what it was given.
  const std::string home = dir.path() + "/platform-engineer";
  fs::permissions(dir.path(), fs::perms::others_exec | fs::perms::group_exec, fs::perm_options::add);
  fs::create_directories(home + "/.config/containers");
  fs::create_directories(home + "/bin");
  const int port = free_port();
  const std::string registry = "127.0.0.1:" + std::to_string(port);
  {
    std::ofstream(home + "/.config/containers/registries.conf")
        << "[[registry]]\nlocation = \"" << registry << "\"\ninsecure = true\n";
    std::ofstream(dir.path() + "/registry.yml")
        << "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        << "    rootdirectory: " << dir.path() << "/registry\nhttp:\n  addr: " << registry << "\n";
    std::ofstream(home + "/bin/kubectl")
        << "#!/bin/sh\n# kubectl stand-in: keeps the manifest it was given.\n"
        << "[ \"$1 $2 $3\" = \"apply -f -\" ] || exit 2\ncat > \"$HOME/applied.yaml\"\n";
  }
  fs::permissions(home + "/bin/kubectl", fs::perms::owner_all | fs::perms::group_read |
                                             fs::perms::group_exec | fs::perms::others_read |
                                             fs::perms::others_exec);
  fs::copy(layout, home + "/gpumeter-oci", fs::copy_options::recursive);
  fs::copy_file(source_dir() + "/deploy/kubernetes/gpumeter-daemonset.yaml",
                home + "/gpumeter-daemonset.yaml");
  ASSERT_EQ(run_command({"/bin/chown", "-R", "65534:65534", home}).exit_code, 0);
  Background reg({"/usr/bin/docker-registry", "serve", dir.path() + "/registry.yml"}, {}, dir.path(),
                 "registry");
  for (int i = 0;
       i < 100 && run_command({"/usr/bin/curl", "-sf", "http://" + registry + "/v2/"}).exit_code != 0; ++i)
    usleep(100 * 1000);
  const auto lines = getting_started("kubernetes");
  ASSERT_GE(lines.size(), 3u) << "README.md has no getting-started: kubernetes block";
  ASSERT_TRUE(lines[0].starts_with("REGISTRY=")) << "the block starts by naming the user's registry";
  std::string script = "REGISTRY=" + registry + "\n";  // the one line a user edits
  for (std::size_t i = 1; i < lines.size(); ++i) script += lines[i] + "\n";
  auto k8s = run_command({"/usr/bin/setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                          "/usr/bin/env", "-i", "HOME=" + home, "TMPDIR=" + home,
                          "PATH=" + home + "/bin:/usr/bin:/bin", "/bin/sh", "-ec", "cd \"$HOME\"\n" + script},
                         {}, std::nullopt, 300);
  ASSERT_EQ(k8s.exit_code, 0) << k8s.out << k8s.err;
  const std::string applied = read_file(home + "/applied.yaml");
  EXPECT_NE(applied.find("image: " + registry + "/gpumeter:" GPUMETER_VERSION), std::string::npos) << applied;
  auto inspect = run_command({"/usr/bin/setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                              "/usr/bin/env", "-i", "HOME=" + home, "TMPDIR=" + home, "/usr/bin/skopeo",
                              "inspect", "--config", "docker://" + registry + "/gpumeter:" GPUMETER_VERSION});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const auto pushed = nlohmann::json::parse(inspect.out)["config"];
  EXPECT_EQ(pushed["User"], "65532:65532");
  EXPECT_EQ(pushed["Entrypoint"], nlohmann::json::array({"/usr/bin/gpumeter"}));
  EXPECT_TRUE(pushed["ExposedPorts"].contains("9835/tcp"));
}

}  // namespace
}  // namespace gm::test
