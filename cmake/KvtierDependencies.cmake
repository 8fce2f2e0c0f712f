# Every third-party dependency, found once. All come from Debian 12 packages that
# scripts/install-deps.sh installs.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(CapnProto REQUIRED)
find_package(spdlog REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(ROCKSDB REQUIRED IMPORTED_TARGET rocksdb)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)

# Asio is header-only in Debian (libasio-dev) and ships no CMake package.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(kvtier_asio INTERFACE)
target_include_directories(kvtier_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(kvtier_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(kvtier_asio INTERFACE Threads::Threads)
add_library(kvtier::asio ALIAS kvtier_asio)

# Engines' KV event streams (services/coordinator/engines): libzmq through cppzmq
# (libzmq3-dev, cppzmq-dev) and msgpack-cxx (libmsgpack-cxx-dev). msgpack-cxx's CMake
# package asks for Boost, which kvtier does not use: its headers are taken without it.
find_package(cppzmq REQUIRED)
find_path(MSGPACK_INCLUDE_DIR msgpack.hpp REQUIRED)
add_library(kvtier_msgpack INTERFACE)
target_include_directories(kvtier_msgpack SYSTEM INTERFACE ${MSGPACK_INCLUDE_DIR})
target_compile_definitions(kvtier_msgpack INTERFACE MSGPACK_NO_BOOST MSGPACK_DEFAULT_API_VERSION=3)
add_library(kvtier::msgpack ALIAS kvtier_msgpack)

include(GoogleTest)

# The client SDK's Python binding (pybind11-dev, python3-dev). Not built under the
# sanitizers: an instrumented extension cannot load into an uninstrumented interpreter.
if(NOT KVTIER_INSTRUMENTED)
  find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
  set(PYBIND11_FINDPYTHON ON)
  find_package(pybind11 CONFIG REQUIRED)
endif()
