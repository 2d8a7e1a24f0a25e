// The object that carries tests/support/test_pch.h (tests/CMakeLists.txt).
