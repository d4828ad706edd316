# Planner replicas on etcd (planner/service/ha_replica.h): real cacheroute-planner processes
# against a real etcd (tests/support/etcd_process.h; they skip, saying so, when /usr/bin/etcd is
# missing). Not under ThreadSanitizer: the work is in other processes and Debian's gRPC.
if(TARGET cacheroute_coord)
  # cacheroute::workload_gen: tests/support/json_reader.h.
  cacheroute_add_test(NAME ha_replica_test SOURCES ha_replica_test.cc
                      LIBS cacheroute::planner_service cacheroute::dataplane_grpc
                           cacheroute::coord cacheroute::etcd_proto cacheroute::workload_gen
                      RUNS cacheroute-planner cacheroutectl)
endif()
# The HA benchmark's smoke run (tools/eval/bench/ha_bench.cc --quick: 1 failover, 20 streams,
# 3 versions): it exits 1 unless a new leader published a greater version and every stream
# applied every version; 77 (skipped) without /usr/bin/etcd. Checks the outcome, never timing.
if(TARGET cacheroute-ha-bench)
  add_test(NAME ha_bench_smoke_test COMMAND cacheroute-ha-bench --quick)
  set_tests_properties(ha_bench_smoke_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 90)
  # A target of the test's name, as .ci/run builds every test by name (in build-asan too).
  add_custom_target(ha_bench_smoke_test)
  add_dependencies(ha_bench_smoke_test cacheroute-ha-bench)
endif()
