// Precompiled for actors/ only: CAF's headers are most of each translation unit's compile time.
#pragma once
#include <spdlog/spdlog.h>
#include <caf/all.hpp>
