# The semi-synthetic workload generator and trace reader (issue 5). Included from
# tools/eval/CMakeLists.txt, so paths are relative to this file's folder.
find_package(nlohmann_json 3 CONFIG REQUIRED)
set(_dir ${CMAKE_CURRENT_LIST_DIR})
cacheroute_library(cacheroute_workload_gen
  SOURCES ${_dir}/arrivals.cc ${_dir}/json_line.cc ${_dir}/mooncake.cc ${_dir}/workload.cc
          ${_dir}/workload_stats.cc
  PUBLIC cacheroute::workload absl::status absl::statusor
  PRIVATE cacheroute::dataplane absl::flat_hash_map absl::flat_hash_set absl::str_format absl::strings
          nlohmann_json::nlohmann_json)

cacheroute_program(cacheroute-workload SOURCES ${_dir}/workload_main.cc INSTALL
  LIBS cacheroute::workload_gen CLI11::CLI11 absl::str_format absl::strings)
