# cmake --install: headers, the library and a package config, so that a user's project can
# find_package(mixtrain) and link mixtrain::mixtrain.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS mixtrain EXPORT mixtrainTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/mixtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/mixtrain/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixtrain)
install(EXPORT mixtrainTargets NAMESPACE mixtrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mixtrain)
if(MIXTRAIN_SHARED)
  set(MT_PACKAGE_STATIC OFF)
else()
  set(MT_PACKAGE_STATIC ON)
endif()
configure_package_config_file(cmake/mixtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mixtrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mixtrain)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mixtrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mixtrainConfig.cmake ${PROJECT_BINARY_DIR}/mixtrainConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mixtrain)
