// Precompiled header of libloom and the CLI: the heavy, stable headers only.
#pragma once
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>
