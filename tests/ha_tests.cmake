# Planner replicas on etcd (planner/service/ha_replica.h): real cacheroute-planner processes
# against a real etcd (tests/support/etcd_process.h; they skip, saying so, when /usr/bin/etcd is
# missing). Not under ThreadSanitizer: the work is in other processes and Debian's gRPC.
if(TARGET cacheroute_coord)
  cacheroute_add_test(NAME ha_replica_test SOURCES ha_replica_test.cc
                      LIBS cacheroute::planner_service cacheroute::dataplane_grpc
                           cacheroute::coord cacheroute::etcd_proto)
  target_compile_definitions(ha_replica_test PRIVATE
                             CACHEROUTE_PLANNER_PATH="$<TARGET_FILE:cacheroute-planner>"
                             CACHEROUTECTL_PATH="$<TARGET_FILE:cacheroutectl>")
  add_dependencies(ha_replica_test cacheroute-planner cacheroutectl)
  target_link_libraries(ha_replica_test PRIVATE cacheroute::workload_gen)  # support/json_reader.h
endif()
