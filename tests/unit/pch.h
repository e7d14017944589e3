#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>
