# The workload part of the simulator: arrival processes, length models, request traces.
add_library(tedi_sim_workload
  workload.cc
  trace.cc
)
target_include_directories(tedi_sim_workload PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tedi_sim_workload PUBLIC tedi_common yaml-cpp)

tedi_add_test(workload_test SOURCES workload_test.cc LIBS tedi_sim_workload GTest::gmock)
tedi_add_test(trace_test SOURCES trace_test.cc LIBS tedi_sim_workload GTest::gmock)
