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

# Headers keep their repository paths ("services/client/client.h").
install(DIRECTORY common/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/common COMPONENT sdk
        FILES_MATCHING PATTERN "*.h" PATTERN "tools" EXCLUDE)
install(FILES services/client/client.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/services/client COMPONENT sdk)
install(FILES ${KVTIER_GENERATED_DIR}/common/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/common COMPONENT sdk)

configure_package_config_file(cmake/kvtierConfig.cmake.in "${PROJECT_BINARY_DIR}/kvtierConfig.cmake"
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/kvtierConfig.cmake" "${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier COMPONENT sdk)
