#include "support/postgres_server.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fcntl.h>

#include "support/support.h"

#ifndef GPUMETER_BINARY_DIR
#define GPUMETER_BINARY_DIR "."
#endif

namespace gm::test {

namespace {

const char* kPgBin = "/usr/lib/postgresql/15/bin";

/// The unprivileged user that owns the server when the tests run as root.
bool as_root() { return geteuid() == 0; }

std::vector<std::string> owner_argv(std::vector<std::string> argv) {
  if (!as_root()) return argv;
  argv.insert(argv.begin(), {"runuser", "-u", "postgres", "--"});
  return argv;
}

void chown_to_owner(const std::string& path, bool recursive) {
  if (!as_root()) return;
  run_command(recursive ? std::vector<std::string>{"chown", "-R", "postgres:postgres", path}
                        : std::vector<std::string>{"chown", "postgres:postgres", path});
}

std::string make_temp_dir(const char* prefix) {
  std::string t = std::string("/tmp/") + prefix + "XXXXXX";
  if (!mkdtemp(t.data())) return "";
  return t;
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/// The initialised cluster every server copies: initdb once per build directory (locked against parallel
/// test processes). Trust for the superuser `gm` on loopback, SCRAM passwords for every other role.
std::string template_dir(std::string& error) {
  const std::string tmpl = std::string(GPUMETER_BINARY_DIR) + "/pg-template-15";
  const int lock = ::open((tmpl + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock >= 0) flock(lock, LOCK_EX);
  std::error_code ec;
  if (!std::filesystem::exists(tmpl + "/PG_VERSION", ec)) {
    const std::string work = make_temp_dir("gm-pg-init-");
    chown_to_owner(work, false);
    auto r = run_command(owner_argv({std::string(kPgBin) + "/initdb", "-D", work + "/data", "-U", "gm", "-A",
                                     "trust", "-E", "UTF8", "--locale=C", "--no-sync"}),
                         {}, std::nullopt, 300);
    if (r.exit_code != 0) {
      error = "initdb failed: " + r.out + r.err;
    } else {
      const std::string hba =
          "local all all trust\n"
          "host all gm 127.0.0.1/32 trust\n"
          "host all all 127.0.0.1/32 scram-sha-256\n";
      if (FILE* f = std::fopen((work + "/data/pg_hba.conf").c_str(), "w")) {
        std::fputs(hba.c_str(), f);
        std::fclose(f);
      }
      std::filesystem::remove_all(tmpl, ec);
      run_command({"cp", "-a", work + "/data", tmpl + ".tmp"});
      std::filesystem::rename(tmpl + ".tmp", tmpl, ec);
      if (ec) error = "cannot place the template " + tmpl + ": " + ec.message();
    }
    std::filesystem::remove_all(work, ec);
  }
  if (lock >= 0) ::close(lock);
  return tmpl;
}

}  // namespace

PostgresServer::PostgresServer() {
  const std::string tmpl = template_dir(error_);
  if (!error_.empty()) return;
  dir_ = make_temp_dir("gm-pg-");
  if (dir_.empty()) {
    error_ = "mkdtemp failed";
    return;
  }
  auto cp = run_command({"cp", "-a", tmpl, dir_ + "/data"});
  if (cp.exit_code != 0) {
    error_ = "cannot copy the template: " + cp.err;
    return;
  }
  chown_to_owner(dir_, true);
  std::filesystem::permissions(dir_ + "/data", std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace);
  for (int attempt = 0; attempt < 3; ++attempt) {
    port_ = free_port();
    if (start()) return;
  }
}

PostgresServer::~PostgresServer() {
  if (!dir_.empty()) {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

PostgresServer& PostgresServer::shared() {
  static PostgresServer server;
  return server;
}

bool PostgresServer::start() {
  auto r = run_command(owner_argv({std::string(kPgBin) + "/pg_ctl", "-D", dir_ + "/data", "-l", dir_ + "/log",
                                   "-w", "-t", "120", "-o",
                                   "-p " + std::to_string(port_) + " -k " + dir_ +
                                       " -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
                                       " -c full_page_writes=off -c max_connections=60",
                                   "start"}),
                       {}, std::nullopt, 180);
  if (r.exit_code != 0) {
    const std::string log = read_file(dir_ + "/log");
    error_ = "pg_ctl start failed: " + r.out + r.err + "\n" + log.substr(log.size() > 2000 ? log.size() - 2000 : 0);
    return false;
  }
  error_.clear();
  return true;
}

bool PostgresServer::stop() {
  auto r = run_command(owner_argv({std::string(kPgBin) + "/pg_ctl", "-D", dir_ + "/data", "-m", "fast", "-w",
                                   "-t", "60", "stop"}),
                       {}, std::nullopt, 90);
  return r.exit_code == 0;
}

std::string PostgresServer::uri(const std::string& db) const {
  return "postgresql://gm@127.0.0.1:" + std::to_string(port_) + "/" + db;
}

std::string PostgresServer::exec(const std::string& db, const std::string& sql) const {
  PGconn* c = PQconnectdb(uri(db).c_str());
  std::string err;
  if (PQstatus(c) != CONNECTION_OK) {
    err = PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, sql.c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) err = PQerrorMessage(c);
    PQclear(r);
  }
  PQfinish(c);
  return err;
}

std::string PostgresServer::create_database() {
  const std::string name = "gm_" + std::to_string(getpid()) + "_" + std::to_string(++next_db_);
  const std::string err = exec("postgres", "CREATE DATABASE " + name);
  return err.empty() ? name : "";
}

}  // namespace gm::test
