# Tests for dataplane_bench: a smoke test that runs cacheroute-dataplane-bench on a small table
# and checks that its --json output has every field. It never checks the figures themselves.
cacheroute_add_test(NAME dataplane_bench_test SOURCES dataplane_bench_test.cc LIBS Threads::Threads)
target_include_directories(dataplane_bench_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(dataplane_bench_test PRIVATE
                           CACHEROUTE_DATAPLANE_BENCH_PATH="$<TARGET_FILE:cacheroute-dataplane-bench>")
add_dependencies(dataplane_bench_test cacheroute-dataplane-bench)
target_link_libraries(dataplane_bench_test PRIVATE cacheroute::workload_gen)  # support/json_reader.h
