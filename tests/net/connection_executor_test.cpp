// A connection runs on the io_context's own executor when one thread runs the context (an
// io_runtime with one thread, or a lent one), and on a strand of its own otherwise.
#include "net/connection_executor.hpp"

#include <gtest/gtest.h>

#include <boost/asio/strand.hpp>

#include "net/io_runtime.hpp"

namespace tether::net {
namespace {

namespace asio = boost::asio;
using plain_executor = asio::io_context::executor_type;
using strand_executor = asio::strand<plain_executor>;

asio::io_context& context_of(io_runtime& io) {
  return *static_cast<asio::io_context*>(io.native());
}

TEST(ConnectionExecutorTest, OneThreadMeansNoStrand) {
  io_runtime lent{io_runtime::lent_thread};
  io_runtime one{1};
  for (auto* io : {&lent, &one}) {
    const auto ex = connection_executor(context_of(*io));
    EXPECT_NE(ex.target<plain_executor>(), nullptr);
    EXPECT_EQ(ex.target<strand_executor>(), nullptr);
  }
}

TEST(ConnectionExecutorTest, SeveralThreadsMeanAStrandPerConnection) {
  io_runtime two{2};
  const auto a = connection_executor(context_of(two));
  const auto b = connection_executor(context_of(two));
  ASSERT_NE(a.target<strand_executor>(), nullptr);
  ASSERT_NE(b.target<strand_executor>(), nullptr);
  EXPECT_NE(*a.target<strand_executor>(), *b.target<strand_executor>());
}

TEST(ConnectionExecutorTest, AContextNobodyMarkedGetsAStrand) {
  asio::io_context bare{1};
  EXPECT_NE(connection_executor(bare).target<strand_executor>(), nullptr);
}

}  // namespace
}  // namespace tether::net
