#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "sys/spawn.h"

namespace gm {
namespace {

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return out;
}

TEST(SpawnTest, PipesOwnProcessGroupAndEnvironment) {
  sys::PosixProcessRunner runner;
  sys::SpawnOptions o;
  o.argv = {"sh", "-c", "echo \"$GM_X $(ps -o pgid= -p $$ | tr -d ' ') $$\"; echo err >&2; exit 5"};
  o.env["GM_X"] = "hello";
  auto c = runner.spawn(o);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const std::string out = read_all(c->stdout_fd);
  const std::string err = read_all(c->stderr_fd);
  int status = 0;
  waitpid(c->pid, &status, 0);
  if (c->owns_terminal) sys::restore_terminal_foreground();
  EXPECT_EQ(sys::exit_code_of_wait_status(status), 5);
  EXPECT_EQ(err, "err\n");
  const std::string pid = std::to_string(c->pid);
  EXPECT_EQ(out, "hello " + pid + " " + pid + "\n") << "the job leads its own process group";
}

TEST(SpawnTest, PtyGivesATerminalWithTheWindowSize) {
  sys::PosixProcessRunner runner;
  sys::SpawnOptions o;
  o.argv = {"sh", "-c", "[ -t 1 ] && echo tty; stty size"};
  o.use_pty = true;
  o.window = std::make_pair<unsigned short, unsigned short>(33, 101);
  auto c = runner.spawn(o);
  ASSERT_TRUE(c.ok()) << c.error().message;
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(c->pty_fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));  // EIO at hangup
  close(c->pty_fd);
  int status = 0;
  waitpid(c->pid, &status, 0);
  EXPECT_EQ(sys::exit_code_of_wait_status(status), 0);
  EXPECT_NE(out.find("tty"), std::string::npos) << out;
  EXPECT_NE(out.find("33 101"), std::string::npos) << out;
}

TEST(SpawnTest, MissingProgramAndSignals) {
  sys::PosixProcessRunner runner;
  sys::SpawnOptions o;
  o.argv = {"/no/such/program"};
  auto c = runner.spawn(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind, ErrorKind::not_found);
  EXPECT_NE(c.error().message.find("/no/such/program"), std::string::npos);
  o.argv = {"sleep", "10"};
  c = runner.spawn(o);
  ASSERT_TRUE(c.ok());
  kill(-c->pid, SIGTERM);
  int status = 0;
  waitpid(c->pid, &status, 0);
  if (c->owns_terminal) sys::restore_terminal_foreground();
  EXPECT_EQ(sys::exit_code_of_wait_status(status), 128 + SIGTERM);
  close(c->stdout_fd);
  close(c->stderr_fd);
}

TEST(SpawnTest, ParsesSignals) {
  EXPECT_EQ(*sys::parse_signal("TERM"), SIGTERM);
  EXPECT_EQ(*sys::parse_signal("sigint"), SIGINT);
  EXPECT_EQ(*sys::parse_signal("10"), 10);
  EXPECT_FALSE(sys::parse_signal("NOPE").ok());
  EXPECT_FALSE(sys::parse_signal("0").ok());
  EXPECT_EQ(sys::signal_name(SIGKILL), "SIGKILL");
}

}  // namespace
}  // namespace gm
