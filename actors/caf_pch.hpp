// Precompiled for actors/ only: CAF is ~2.5 s per translation unit without it.
#pragma once
#include <caf/all.hpp>
#include <spdlog/spdlog.h>
