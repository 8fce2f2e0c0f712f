// Helpers shared by kvtier's tests: temporary directories, raw sockets, child commands.
//
// Thread safety: free functions and a RAII type; no shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>
#include <string>

#include "common/scratch_dir.h"
#include "services/bench/held_port.h"

namespace kvtier::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  const std::string& path() const { return dir_.path(); }
  std::string File(const std::string& name) const { return path() + "/" + name; }

 private:
  ScratchDir dir_;
};

// A blocking socket connected to "host:port" (IPv4) or "unix:/path"; -1 when it cannot
// connect. The caller closes it. `receive_buffer` > 0: its SO_RCVBUF, set before the
// connection (a TCP peer then sees a small window: a client that reads slowly).
int ConnectRaw(const std::string& address, int receive_buffer = 0);

// Connects to "host:port" (IPv4) or "unix:/path", sends `bytes`, half-closes nothing, and
// reads until the peer closes the connection or `timeout` passes.
struct RawExchange {
  bool connected = false;
  bool peer_closed = false;  // the peer closed (EOF or reset) within the timeout
  std::string received;
};
RawExchange SendRaw(const std::string& address, const std::string& bytes,
                    std::chrono::milliseconds timeout);

// Polls `done` every 2 ms until it holds or `timeout` passes; returns whether it held.
// For state another thread reaches a moment after the call that caused it.
bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(5));

// Runs `command` with /bin/sh; returns its exit code and puts stdout+stderr in `output`.
int RunCommand(const std::string& command, std::string* output);

// Writes `text` to `path`; returns false on failure.
bool WriteFile(const std::string& path, const std::string& text);

// Makes, with the openssl command line, in `dir`: ca.pem/ca.key (a CA), server.pem/
// server.key (signed by it for DNS kvtier.test and IP 127.0.0.1) and stranger.pem/
// stranger.key (self-signed). Returns openssl's output when a command failed, else "".
std::string MakeTestCertificates(const std::string& dir);

// A held loopback port (services/bench/held_port.h) for a test's server that starts at an address
// chosen beforehand: in a child process, or again where it was stopped. (CI once saw a
// store dial its coordinator's old port and reach another test's HTTP server.) Aborts
// when no port can be held: a port of 0 would fail far from the cause.
class ReservedPort {
 public:
  ReservedPort() : held_(HeldPort::Pick().value()) {}
  uint16_t port() const { return held_.port(); }
  std::string address() const { return held_.address(); }  // "127.0.0.1:<port>"

 private:
  HeldPort held_;
};

}  // namespace kvtier::testing

namespace kvtier::testing {

// A child process with stdout and stderr captured to files, killed on destruction.
class ChildProcess {
 public:
  // argv[0] is the program path. Returns a process that failed to start as exit code 127.
  ChildProcess(const std::vector<std::string>& argv, const std::string& output_dir);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Waits until stdout contains `text`, the process exits, or `timeout` passes.
  bool WaitForOutput(const std::string& text, std::chrono::milliseconds timeout) const;
  void Signal(int signal_number) const;
  // The exit code, -(signal) if killed by a signal, or -1000 if still running at `timeout`.
  int Wait(std::chrono::milliseconds timeout);
  std::string Stdout() const;
  std::string Stderr() const;
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
  int exit_code_ = -1000;
  std::string stdout_path_;
  std::string stderr_path_;
};

}  // namespace kvtier::testing
