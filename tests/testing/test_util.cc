#include "tests/testing/test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kvtier::testing {

namespace {
ScratchDir MadeOrAbort() {
  Result<ScratchDir> dir = ScratchDir::Create("kvtier_test");
  if (!dir.ok()) std::abort();  // a test cannot run without one
  return std::move(dir).value();
}
}  // namespace

TempDir::TempDir() : dir_(MadeOrAbort()) {}

namespace {

// A stream socket of `addr`'s family with its receive buffer set, connected to it; -1 when
// the connection fails.
template <typename Address>
int ConnectTo(const Address& addr, int receive_buffer) {
  const sockaddr* const generic = reinterpret_cast<const sockaddr*>(&addr);
  const int fd = socket(generic->sa_family, SOCK_STREAM, 0);
  if (receive_buffer > 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  if (connect(fd, generic, sizeof(addr)) == 0) return fd;
  close(fd);
  return -1;
}

}  // namespace

int ConnectRaw(const std::string& address, int receive_buffer) {
  if (address.starts_with("unix:")) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = address.substr(5);
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    return ConnectTo(addr, receive_buffer);
  }
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  return ConnectTo(addr, receive_buffer);
}

RawExchange SendRaw(const std::string& address, const std::string& bytes,
                    std::chrono::milliseconds timeout) {
  RawExchange result;
  const int fd = ConnectRaw(address);
  if (fd < 0) return result;
  result.connected = true;
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the peer may close before taking everything
    sent += static_cast<size_t>(n);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      result.peer_closed = true;
      break;
    }
    result.received.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return result;
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  for (const auto deadline = std::chrono::steady_clock::now() + timeout;;
       std::this_thread::sleep_for(std::chrono::milliseconds(2))) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[1024];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    if (output != nullptr) *output += buffer;
  }
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string MakeTestCertificates(const std::string& dir) {
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  const std::string commands[] = {
      "openssl req -x509 " + key + " -days 2 -subj /CN=test-ca -keyout ca.key -out ca.pem",
      "openssl req " + key + " -subj /CN=kvtier.test -keyout server.key -out server.csr",
      "printf 'subjectAltName=DNS:kvtier.test,IP:127.0.0.1\\n' > san.ext",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2"
      " -extfile san.ext -out server.pem",
      "openssl req -x509 " + key +
          " -days 2 -subj /CN=stranger -keyout stranger.key"
          " -out stranger.pem"};
  for (const std::string& command : commands) {
    std::string output;
    if (RunCommand("cd " + dir + " && " + command, &output) != 0) return command + ": " + output;
  }
  return "";
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace kvtier::testing

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include <sstream>
#include <thread>

namespace kvtier::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& output_dir)
    : stdout_path_(output_dir + "/child.stdout"), stderr_path_(output_dir + "/child.stderr") {
  pid_ = fork();
  if (pid_ == 0) {
    const int out = open(stdout_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    // The test runner may block signals; the child starts with a clean mask.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && exit_code_ == -1000) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool ChildProcess::WaitForOutput(const std::string& text, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ReadAll(stdout_path_).find(text) != std::string::npos) return true;
    if (waitpid(pid_, nullptr, WNOHANG) == pid_)
      return ReadAll(stdout_path_).find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void ChildProcess::Signal(int signal_number) const { kill(pid_, signal_number); }

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_ != -1000) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      return exit_code_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1000;
}

std::string ChildProcess::Stdout() const { return ReadAll(stdout_path_); }
std::string ChildProcess::Stderr() const { return ReadAll(stderr_path_); }

}  // namespace kvtier::testing
