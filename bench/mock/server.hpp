// The mock's listener and process lifetime: accept (plain or TLS) until SIGTERM/SIGINT.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tether::mock {

struct server_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::optional<std::string> tls_cert;  // PEM chain; with tls_key, the port serves HTTPS only
  std::optional<std::string> tls_key;
  // The API is served under this path (e.g. "/api": /api/v1/chat/completions), as behind a
  // provider's URL prefix; /health and the control paths stay at the server root. "" = none.
  std::string path_prefix;
};

// Prints "tether-mock listening on HOST:PORT[ (tls)]" once listening; returns the exit code.
int run_server(const server_options& options);

}  // namespace tether::mock
