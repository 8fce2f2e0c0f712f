// OpenSSL contexts for kvtier's TLS ends that run on OpenSSL directly (the RPC clients,
// the data stream's server and client), and the checks every such client makes.
//
// Servers load a certificate chain and private key (PEM files). Clients trust only the
// CA bundle they are given (never the system store: a cluster has its own CA), verify
// the peer, and expect a server name: an IPv4/IPv6 literal is matched against the
// certificate's IP subjectAltNames (no SNI is sent, as RFC 6066 asks), anything else
// against its DNS names (with SNI). TLS 1.2 at least, no renegotiation.
//
// Errors name the file (under the setting's name, e.g. "tls.ca_file") and what was wrong.
//
// Thread safety: an SSL_CTX is safe to share among threads once made (OpenSSL's contract);
// each SSL made from it is used by one thread at a time.
// Ownership: the shared_ptr frees the context when its last holder, SSL objects aside,
// lets go; every SSL made from a context must be freed before it.
#pragma once

#include <openssl/types.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace kvtier {

using TlsContextPtr = std::shared_ptr<SSL_CTX>;

// A client context trusting exactly the certificates of `ca_file`. kInvalidArgument
// naming the file when it cannot be read or holds no certificate.
[[nodiscard]] Result<TlsContextPtr> MakeTlsClientContext(const std::string& ca_file);

// A server context presenting `cert_file`'s chain with `key_file`'s key. kInvalidArgument
// naming the file that cannot be read or parsed, or the pair when the key does not match.
[[nodiscard]] Result<TlsContextPtr> MakeTlsServerContext(const std::string& cert_file,
                                                         const std::string& key_file);

// Makes `ssl` (a client end, before its handshake) expect `server_name`, as above.
// kInvalidArgument for an empty name or one OpenSSL cannot take.
[[nodiscard]] Status ExpectTlsServerName(SSL* ssl, const std::string& server_name);

// After a client's handshake: the server presented a certificate that verified.
// kUnauthenticated naming why otherwise ("hostname mismatch", "self-signed certificate").
[[nodiscard]] Status CheckTlsPeerVerified(SSL* ssl);

// Makes `ssl` read and write the socket `fd` (blocking or not) through a BIO that sends
// with MSG_NOSIGNAL: OpenSSL's own socket BIO write()s, which raises SIGPIPE in the whole
// process when a peer has gone. The caller keeps `fd` open while `ssl` lives.
[[nodiscard]] Status AttachTlsSocket(SSL* ssl, int fd);

// OpenSSL's queued errors as one line, the queue cleared.
std::string TlsErrors();

}  // namespace kvtier
