add_library(tedi_policy
  latency_profile.cc
  step_estimator.cc
  step_features.cc
  threshold_controller.cc
  scheduler.cc
)
target_include_directories(tedi_policy PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tedi_policy PUBLIC tedi_common)

tedi_add_test(latency_profile_test SOURCES latency_profile_test.cc LIBS tedi_policy GTest::gmock)
tedi_add_test(step_features_test SOURCES step_features_test.cc LIBS tedi_policy)
tedi_add_test(step_estimator_test SOURCES step_estimator_test.cc LIBS tedi_policy)
tedi_add_test(threshold_controller_test SOURCES threshold_controller_test.cc LIBS tedi_policy)
tedi_add_test(scheduler_test SOURCES scheduler_test.cc LIBS tedi_policy GTest::gmock)

# Policy cost (Algorithm 2 and one dispatch cycle at cluster scale); a plain executable.
add_executable(policy_bench policy_bench.cc)
target_link_libraries(policy_bench PRIVATE tedi_policy)
