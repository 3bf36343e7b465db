# The simulator proper: event loop, results, experiments (config -> runs -> files).
add_library(tedi_sim
  simulator.cc
  results.cc
  experiment.cc
)
target_include_directories(tedi_sim PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tedi_sim PUBLIC tedi_policy tedi_predictor tedi_sim_workload tedi_sim_denoise tedi_sim_engine
                      tedi_sim_plots yaml-cpp)
