// The client end of a TLS connection over any kj stream, on OpenSSL directly.
//
// Why not kj-tls's client: kj-tls 0.9 verifies a server by DNS name only (an address such
// as 127.0.0.1 or a pod IP never matches a certificate's IP subjectAltName), and cluster
// nodes reach each other by IP as often as by name. The server end stays kj-tls's.
//
// ConnectTls handshakes, then checks the certificate chain against the context's trust
// store and the certificate against `server_name`: an IPv4 or IPv6 literal is matched
// against IP subjectAltNames (and sends no SNI, as RFC 6066 asks), anything else against
// DNS names (with SNI). Failures are kj exceptions naming what was wrong ("hostname
// mismatch", "IP address mismatch", "self-signed certificate", ...).
//
// Thread safety: a stream is used on the event-loop thread that made it, by at most one
// reader and one writer at a time (kj's contract for streams).
// Ownership: the stream owns `inner`; the SSL_CTX must outlive every stream made from it.
// REQUIRES: `context` verifies peers (SSL_VERIFY_PEER) and trusts the cluster's CA.
#pragma once

#include <kj/async-io.h>
#include <openssl/types.h>

#include <string>

namespace kvtier::rpc {

kj::Promise<kj::Own<kj::AsyncIoStream>> ConnectTls(SSL_CTX& context,
                                                   kj::Own<kj::AsyncIoStream> inner,
                                                   const std::string& server_name);

}  // namespace kvtier::rpc
