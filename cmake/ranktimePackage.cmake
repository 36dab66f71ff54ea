# What `cmake --install` needs beyond the executables and the Python package (their folders install
# those): libranktime and its headers, the CMake package (find_package(ranktime) and the target
# ranktime::ranktime, also usable from the build tree without installing) and ranktime.pc.
include(CMakePackageConfigHelpers)

# What a program that uses ranktime needs: C++17 (ranktime.h uses std::optional and
# std::string_view) and MPI (it runs under mpirun, and may call MPI itself).
target_compile_features(ranktime PUBLIC cxx_std_17)
target_link_libraries(ranktime INTERFACE MPI::MPI_CXX)

set(RANKTIME_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ranktime)
install(TARGETS ranktime EXPORT ranktimeTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/collective/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ranktimeTargets NAMESPACE ranktime:: DESTINATION ${RANKTIME_CMAKE_INSTALL_DIR})

write_basic_package_version_file(${CMAKE_BINARY_DIR}/ranktimeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ranktimeConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/ranktimeConfig.cmake
                              INSTALL_DESTINATION ${RANKTIME_CMAKE_INSTALL_DIR})
install(FILES ${CMAKE_BINARY_DIR}/cmake/ranktimeConfig.cmake
              ${CMAKE_BINARY_DIR}/ranktimeConfigVersion.cmake
        DESTINATION ${RANKTIME_CMAKE_INSTALL_DIR})

# The build tree as a package too: -Dranktime_DIR=<build> or CMAKE_PREFIX_PATH=<build>.
export(EXPORT ranktimeTargets NAMESPACE ranktime:: FILE ${CMAKE_BINARY_DIR}/ranktimeTargets.cmake)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ranktimeConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/ranktimeConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_BINARY_DIR}
                              INSTALL_PREFIX ${CMAKE_BINARY_DIR})

# ranktime.pc, with the MPI that ranktime was built with (as the CMake target carries it).
list(TRANSFORM MPI_CXX_INCLUDE_DIRS PREPEND "-I" OUTPUT_VARIABLE RANKTIME_PC_MPI_CFLAGS)
list(JOIN RANKTIME_PC_MPI_CFLAGS " " RANKTIME_PC_MPI_CFLAGS)
list(JOIN MPI_CXX_LIBRARIES " " RANKTIME_PC_MPI_LIBS)
file(RELATIVE_PATH RANKTIME_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" RANKTIME_PC_TO_PREFIX "${RANKTIME_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/ranktime.pc.in ${CMAKE_BINARY_DIR}/cmake/ranktime.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cmake/ranktime.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
