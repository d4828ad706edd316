# cacheroute_planner_config: PlannerConfig loading (YAML file, then flags) for cacheroute-planner.
# Included from planner/service/CMakeLists.txt; paths are relative to this file.
find_package(yaml-cpp CONFIG REQUIRED)

add_library(cacheroute_planner_config ${CMAKE_CURRENT_LIST_DIR}/config.cc
            ${CMAKE_CURRENT_LIST_DIR}/yaml_fields.cc)
add_library(cacheroute::planner_config ALIAS cacheroute_planner_config)
target_include_directories(cacheroute_planner_config PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(cacheroute_planner_config
  PUBLIC
    cacheroute::planner  # GateOptions (planner/gate.h)
    absl::status
    absl::statusor
    absl::strings
    absl::time
    yaml-cpp
  PRIVATE
    CLI11::CLI11
    absl::str_format
)
