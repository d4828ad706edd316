# Tests for sim: the prefix cache, engine profiles, the engine model and the fleet simulator.
cacheroute_add_test(NAME sim_prefix_cache_test SOURCES sim_prefix_cache_test.cc LIBS cacheroute::sim)
cacheroute_add_test(NAME sim_engine_profile_test SOURCES sim_engine_profile_test.cc
                    LIBS cacheroute::sim)
cacheroute_add_test(NAME sim_engine_test SOURCES sim_engine_test.cc LIBS cacheroute::sim)
cacheroute_add_test(NAME sim_fleet_test SOURCES sim_fleet_test.cc LIBS cacheroute::sim)
cacheroute_add_test(NAME sim_calibration_test SOURCES sim_calibration_test.cc LIBS cacheroute::sim)
