#include <mutex>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "net/downstream.hpp"
#include "net/downstream_session.hpp"
#include "net/io_group.hpp"
#include "net/io_runtime.hpp"
#include "net/listener.hpp"
#include "net/server_context.hpp"

namespace tether::net {

struct http_server::impl {
  impl(const io_group& io, server_limits limits, request_handler handler)
      : io(io), context(std::make_shared<server_context>(limits, std::move(handler))) {}

  std::vector<std::shared_ptr<listener>> listeners_snapshot() {
    std::lock_guard lock(mutex);
    return listeners;
  }

  io_group io;
  std::shared_ptr<server_context> context;
  std::mutex mutex;
  std::vector<std::shared_ptr<listener>> listeners;
};

http_server::http_server(const io_group& io, server_limits limits, request_handler handler)
    : impl_(std::make_shared<impl>(io, limits, std::move(handler))) {}

http_server::~http_server() {
  // Sessions may run on for a few handlers; from here on they call neither the handler nor an
  // observer, which belong to our owner.
  impl_->context->owner_gone();
  close_all();
}

std::uint16_t http_server::listen(const std::string& host, std::uint16_t port) {
  auto acceptor = std::make_shared<listener>(impl_->io, impl_->context);
  const auto bound = acceptor->open(host, port);
  {
    std::lock_guard lock(impl_->mutex);
    impl_->listeners.push_back(acceptor);
  }
  acceptor->start();
  return bound;
}

void http_server::stop_accepting() {
  impl_->context->draining = true;
  for (const auto& acceptor : impl_->listeners_snapshot()) acceptor->stop();
  for (const auto& session : impl_->context->sessions.snapshot()) session->close_if_idle();
}

void http_server::close_all() {
  for (const auto& acceptor : impl_->listeners_snapshot()) acceptor->stop();
  impl_->context->sessions.close();
  for (const auto& session : impl_->context->sessions.snapshot()) session->close_now();
}

std::size_t http_server::open_connections() const {
  return impl_->context->sessions.size();
}

std::uint64_t http_server::accept_failures() const {
  return impl_->context->accept_failures.load();
}

}  // namespace tether::net
