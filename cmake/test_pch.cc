// The source of kvtier_test_pch (cmake/KvtierTargets.cmake): compiling it makes the
// precompiled <gtest/gtest.h> that every test reuses.
