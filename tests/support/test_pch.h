// The headers nearly every test translation unit parses, compiled once
// (tests/CMakeLists.txt, bulwark_test_pch) and reused by every test that
// does not reuse libtorch's. Only stable external headers: a project header
// here would rebuild every test when it changed.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>
