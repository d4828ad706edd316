# Tests for planner/coord (the etcd client and the leader election), each against a real etcd
# started by tests/support/etcd_process.h (they skip, saying so, when /usr/bin/etcd is missing).
if(TARGET cacheroute_coord)
  cacheroute_add_test(NAME coord_etcd_client_test SOURCES coord_etcd_client_test.cc
                      LIBS cacheroute::coord cacheroute::etcd_proto)
  # Also under ThreadSanitizer: the election's thread, the watch reader and the test's own.
  cacheroute_add_test(NAME coord_leader_election_test SOURCES coord_leader_election_test.cc
                      LIBS cacheroute::coord cacheroute::etcd_proto LABELS concurrency)
endif()
