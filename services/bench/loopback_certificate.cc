#include "services/bench/loopback_certificate.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>

#include "common/tls_context.h"

namespace kvtier::bench {
namespace {

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;

// Adds the v3 extension `nid` = `value` (OpenSSL's config syntax) to `cert`.
bool AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  if (extension == nullptr) return false;
  const bool added = X509_add_ext(cert, extension, -1) == 1;
  X509_EXTENSION_free(extension);
  return added;
}

Result<CertPtr> SelfSigned(EVP_PKEY* key) {
  CertPtr cert(X509_new(), X509_free);
  X509_NAME* name = cert ? X509_get_subject_name(cert.get()) : nullptr;
  const bool made = name != nullptr && X509_set_version(cert.get(), 2) == 1 &&
                    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1) == 1 &&
                    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr &&
                    X509_gmtime_adj(X509_getm_notAfter(cert.get()), long{24} * 3600) != nullptr &&
                    X509_set_pubkey(cert.get(), key) == 1 &&
                    X509_NAME_add_entry_by_txt(
                        name, "CN", MBSTRING_ASC,
                        reinterpret_cast<const unsigned char*>("kvtier bench"), -1, -1, 0) == 1 &&
                    X509_set_issuer_name(cert.get(), name) == 1 &&
                    AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE") &&
                    AddExtension(cert.get(), NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost") &&
                    X509_sign(cert.get(), key, EVP_sha256()) > 0;
  if (!made) return InternalError("cannot make the bench's certificate: " + TlsErrors());
  return cert;
}

Status WritePem(const std::string& path, const char* what, int (*write)(FILE*, void*),
                void* object) {
  std::unique_ptr<FILE, decltype(&std::fclose)> file(std::fopen(path.c_str(), "w"), std::fclose);
  if (file == nullptr || write(file.get(), object) != 1)
    return InternalError(std::string("cannot write the bench's ") + what + " to " + path);
  return Status::Ok();
}

}  // namespace

Result<LoopbackCertificate> WriteLoopbackCertificate(const std::string& dir) {
  KeyPtr key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (key == nullptr) return InternalError("cannot make the bench's key: " + TlsErrors());
  KVTIER_ASSIGN_OR_RETURN(CertPtr cert, SelfSigned(key.get()));
  LoopbackCertificate out{.cert_file = dir + "/bench-cert.pem", .key_file = dir + "/bench-key.pem"};
  KVTIER_RETURN_IF_ERROR(WritePem(
      out.key_file, "key",
      [](FILE* f, void* k) {
        return PEM_write_PrivateKey(f, static_cast<EVP_PKEY*>(k), nullptr, nullptr, 0, nullptr,
                                    nullptr);
      },
      key.get()));
  KVTIER_RETURN_IF_ERROR(WritePem(
      out.cert_file, "certificate",
      [](FILE* f, void* c) { return PEM_write_X509(f, static_cast<X509*>(c)); }, cert.get()));
  return out;
}

}  // namespace kvtier::bench
