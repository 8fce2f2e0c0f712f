// A throwaway TLS identity for benchmarks on loopback (`kvtier bench transfer --tls`).
//
// WriteLoopbackCertificate() makes a fresh EC P-256 key and a self-signed certificate for
// 127.0.0.1 and "localhost" (its own CA: basic constraints CA:TRUE, subjectAltName
// IP:127.0.0.1 and DNS:localhost, valid for a day) and writes them as PEM into `dir`. A
// server presents cert_file with key_file; a client trusts cert_file as its CA. Only
// for measuring on one machine: the key is written unencrypted.
//
// Thread safety: any thread. Ownership: the caller removes the files.
#pragma once

#include <string>

#include "common/status.h"

namespace kvtier::bench {

struct LoopbackCertificate {
  std::string cert_file;  // the certificate, which is also the CA to trust
  std::string key_file;
  std::string server_name = "127.0.0.1";  // what the clients verify
};

// kInternal naming the OpenSSL step that failed; an I/O error naming the file.
// REQUIRES: `dir` exists and is writable.
[[nodiscard]] Result<LoopbackCertificate> WriteLoopbackCertificate(const std::string& dir);

}  // namespace kvtier::bench
