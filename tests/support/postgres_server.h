#pragma once
// A real PostgreSQL 15 server for tests (never a mock): initdb into a temporary directory (from a template
// initialised once per build), started by pg_ctl on 127.0.0.1 with an ephemeral port and its socket in that
// directory, as an unprivileged user (the `postgres` system user when the tests run as root), stopped at
// destruction. `shared()` starts one lazily per test process; each test takes a fresh database.
#include <memory>
#include <string>

namespace gm::test {

class PostgresServer {
 public:
  /// Starts a server of its own (initdb from the template, pg_ctl start); check ok().
  PostgresServer();
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  /// The server of this test process, started on first use.
  static PostgresServer& shared();

  bool ok() const { return error_.empty(); }
  /// Why it could not start (with the server log's tail).
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  /// postgresql://gm@127.0.0.1:PORT/DB (the superuser, trusted on loopback).
  std::string uri(const std::string& db) const;
  /// Creates a new empty database and returns its name.
  std::string create_database();
  /// Runs SQL as the superuser in `db`; "" on success, else the error.
  std::string exec(const std::string& db, const std::string& sql) const;
  /// Stops the server (fast shutdown); start() brings it back on the same port and data.
  bool stop();
  bool start();

 private:
  std::string run_as_owner(const std::string& command) const;
  std::string dir_;
  std::string error_;
  int port_ = 0;
  int next_db_ = 0;
};

}  // namespace gm::test
