// gateway_config's own answers: here, where the ledger's file is.
#include "config/config.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tether::config {
namespace {

std::string ledger_file_of(const std::string& config_file, const std::string& path) {
  gateway_config cfg;
  cfg.source_file = config_file;
  cfg.ledger.path = path;
  return cfg.ledger_file();
}

TEST(LedgerFileTest, UnsetIsTetherLedgerDbNextToTheConfigFile) {
  EXPECT_EQ(ledger_file_of("/etc/tether/tether.toml", ""), "/etc/tether/tether-ledger.db");
  EXPECT_EQ(ledger_file_of("conf/tether.toml", ""), "conf/tether-ledger.db");
  // A config file in the working directory, or none: the working directory.
  EXPECT_EQ(ledger_file_of("tether.toml", ""), "tether-ledger.db");
  EXPECT_EQ(ledger_file_of("", ""), "tether-ledger.db");
}

TEST(LedgerFileTest, ARelativePathIsReadFromTheConfigFilesDirectory) {
  EXPECT_EQ(ledger_file_of("/etc/tether/tether.toml", "usage.db"), "/etc/tether/usage.db");
  EXPECT_EQ(ledger_file_of("/etc/tether/tether.toml", "data/usage.db"),
            "/etc/tether/data/usage.db");
  EXPECT_EQ(ledger_file_of("/etc/tether/tether.toml", "../lib/usage.db"),
            "/etc/tether/../lib/usage.db");
  EXPECT_EQ(ledger_file_of("conf/tether.toml", "usage.db"), "conf/usage.db");
  EXPECT_EQ(ledger_file_of("", "usage.db"), "usage.db");
}

TEST(LedgerFileTest, AnAbsolutePathIsTakenAsWritten) {
  EXPECT_EQ(ledger_file_of("/etc/tether/tether.toml", "/var/lib/tether/usage.db"),
            "/var/lib/tether/usage.db");
  EXPECT_EQ(ledger_file_of("conf/tether.toml", "/srv/usage.db"), "/srv/usage.db");
}

}  // namespace
}  // namespace tether::config
