# The semi-synthetic workload generator and trace reader (issue 5). Included from
# tools/eval/CMakeLists.txt, so paths are relative to this file's folder.
find_package(nlohmann_json 3 CONFIG REQUIRED)
add_library(cacheroute_workload_gen
            ${CMAKE_CURRENT_LIST_DIR}/arrivals.cc
            ${CMAKE_CURRENT_LIST_DIR}/json_line.cc
            ${CMAKE_CURRENT_LIST_DIR}/mooncake.cc
            ${CMAKE_CURRENT_LIST_DIR}/workload.cc
            ${CMAKE_CURRENT_LIST_DIR}/workload_stats.cc)
add_library(cacheroute::workload_gen ALIAS cacheroute_workload_gen)
target_include_directories(cacheroute_workload_gen PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(cacheroute_workload_gen
                      PUBLIC cacheroute::workload absl::status absl::statusor
                      PRIVATE absl::flat_hash_map absl::flat_hash_set absl::str_format
                              absl::strings nlohmann_json::nlohmann_json)

add_executable(cacheroute-workload ${CMAKE_CURRENT_LIST_DIR}/workload_main.cc)
target_link_libraries(cacheroute-workload PRIVATE cacheroute::workload_gen CLI11::CLI11
                      absl::str_format absl::strings)
install(TARGETS cacheroute-workload RUNTIME DESTINATION bin)
