# Tests for client/: the rates-file parser, the plan formatters, and cacheroutectl end to end.
cacheroute_add_test(NAME rates_csv_test SOURCES rates_csv_test.cc
                    LIBS cacheroute_client_lib LABELS client)
cacheroute_add_test(NAME plan_output_test SOURCES plan_output_test.cc
                    LIBS cacheroute_client_lib LABELS client)
cacheroute_add_test(NAME cacheroutectl_test SOURCES cacheroutectl_test.cc
                    LIBS cacheroute_client_lib LABELS client)
target_compile_definitions(cacheroutectl_test PRIVATE
                           CACHEROUTECTL_PATH="$<TARGET_FILE:cacheroutectl>")
add_dependencies(cacheroutectl_test cacheroutectl)
# The online commands end to end: a real planner in the test process on a loopback port, and the
# real cacheroutectl binary run against it.
cacheroute_add_test(NAME cacheroutectl_online_test SOURCES cacheroutectl_online_test.cc
                    LIBS cacheroute::planner_service absl::strings LABELS client)
target_compile_definitions(cacheroutectl_online_test PRIVATE
                           CACHEROUTECTL_PATH="$<TARGET_FILE:cacheroutectl>")
add_dependencies(cacheroutectl_online_test cacheroutectl)
target_link_libraries(plan_output_test PRIVATE cacheroute::workload_gen)  # support/json_reader.h
target_link_libraries(cacheroutectl_test PRIVATE cacheroute::workload_gen)  # support/json_reader.h
target_link_libraries(cacheroutectl_online_test PRIVATE cacheroute::workload_gen)  # support/json_reader.h
