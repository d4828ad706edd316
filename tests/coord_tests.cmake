# Tests for planner/coord (the etcd client and the leader election), each against a real etcd
# started by tests/support/etcd_process.h (they skip, saying so, when /usr/bin/etcd is missing).
if(TARGET cacheroute_coord)
  cacheroute_add_test(NAME coord_etcd_client_test SOURCES coord_etcd_client_test.cc
                      LIBS cacheroute::coord cacheroute::etcd_proto)
  # Also under ThreadSanitizer: the election's thread, the watch reader and the test's own.
  cacheroute_add_test(NAME coord_leader_election_test SOURCES coord_leader_election_test.cc
                      LIBS cacheroute::coord cacheroute::etcd_proto LABELS concurrency)
  if(CACHEROUTE_SANITIZE MATCHES "thread")
    # What TSan cannot see inside Debian's uninstrumented gRPC (tsan-grpc.supp says which).
    set_tests_properties(coord_etcd_client_test coord_leader_election_test PROPERTIES
      ENVIRONMENT "TSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tsan-grpc.supp")
  endif()
endif()
