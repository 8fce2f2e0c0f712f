# `cmake --install build --component sdk --prefix PREFIX` installs the client SDK as a CMake
# package: `find_package(kvtier)` then `target_link_libraries(app kvtier::client)`.
# tests/install builds a program against such a prefix.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(kvtier_build_flags PROPERTIES EXPORT_NAME build_flags)
# The SDK and the static libraries it links (a static library's private dependencies
# are link dependencies of its users).
set(KVTIER_SDK_TARGETS kvtier_build_flags kvtier_common kvtier_auth kvtier_rpc kvtier_client)
install(TARGETS ${KVTIER_SDK_TARGETS} EXPORT kvtierTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT sdk)
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier COMPONENT sdk)

# The SDK's public surface, and nothing else: services/client/client.h and the headers it
# includes, under PREFIX/include/kvtier/ by their repository paths (a program includes
# <kvtier/services/client/client.h>; the headers find each other through include/kvtier).
# tests/install checks that every installed header's includes are installed too, that
# nothing lands outside include/kvtier/, and that a program builds against them alone.
set(KVTIER_SDK_HEADERS services/client/client.h common/block_key.h common/block_vocabulary.h common/clock.h
    common/kv_layout.h common/sink_window.h common/status.h)
foreach(header IN LISTS KVTIER_SDK_HEADERS)
  get_filename_component(directory "${header}" DIRECTORY)
  install(FILES "${header}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/kvtier/${directory}" COMPONENT sdk)
endforeach()

configure_package_config_file(cmake/kvtierConfig.cmake.in "${PROJECT_BINARY_DIR}/kvtierConfig.cmake"
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/kvtierConfig.cmake" "${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier COMPONENT sdk)
