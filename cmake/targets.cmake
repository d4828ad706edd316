# How every compiled library and program of the project is declared.
#
# cacheroute_library(<target> SOURCES file... [PUBLIC lib...] [PRIVATE lib...])
#   A library <target> (named cacheroute_<name>) with the alias cacheroute::<name> (also its
#   EXPORT_NAME), the source root as its include directory (installed: the internal include
#   directory, so "planner/…", "proto/table/…" resolve the same way), and its link libraries.
#
# cacheroute_program(<name> SOURCES file... [LIBS lib...] [INSTALL])
#   A program linked privately to LIBS; INSTALL puts it under bin/ of `cmake --install`.
#
# cacheroute_coroutine_sources(file...)
#   Marks sources of the calling directory built on Asio's C++20 coroutines. In the fuzz build
#   (which .ci/run's AddressSanitizer tree is) they compile at -O0: clang 14 with ASan takes 2-3
#   times as long on them at -O1 (tools/http/server.cc: 140 s of CPU against 51 s, the slowest
#   file of any tree), and no fuzz target links them. They keep ASan and UBSan.
#
# Anything beyond that (compile definitions, dependencies, output folders) stays next to the call.

function(cacheroute_library target)
  cmake_parse_arguments(L "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  if(NOT target MATCHES "^cacheroute_(.+)$")
    message(FATAL_ERROR "cacheroute_library: '${target}' does not start with cacheroute_")
  endif()
  set(name ${CMAKE_MATCH_1})
  add_library(${target} ${L_SOURCES})
  add_library(cacheroute::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CACHEROUTE_INTERNAL_INCLUDEDIR}>)
  if(L_PUBLIC)
    target_link_libraries(${target} PUBLIC ${L_PUBLIC})
  endif()
  if(L_PRIVATE)
    target_link_libraries(${target} PRIVATE ${L_PRIVATE})
  endif()
endfunction()

function(cacheroute_program name)
  cmake_parse_arguments(P "INSTALL" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${P_SOURCES})
  target_link_libraries(${name} PRIVATE ${P_LIBS})
  if(P_INSTALL)
    install(TARGETS ${name} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endfunction()

function(cacheroute_coroutine_sources)
  if(CACHEROUTE_FUZZ)
    set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS -O0)
  endif()
endfunction()
