# Tests for the study layer of cacheroute-sim: SLO capacity, the report, the studies (issue 5).
cacheroute_add_test(NAME sim_capacity_test SOURCES sim_capacity_test.cc LIBS cacheroute::sim_study)
cacheroute_add_test(NAME sim_report_test SOURCES sim_report_test.cc LIBS cacheroute::sim_study)
cacheroute_add_test(NAME sim_study_test SOURCES sim_study_test.cc LIBS cacheroute::sim_study)
