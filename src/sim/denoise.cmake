# The fitted statistical denoising model (DESIGN.md section 4 (b)) and its calibrations.
add_library(tedi_sim_denoise
  statistical_denoiser.cc
  calibration.cc
)
target_include_directories(tedi_sim_denoise PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tedi_sim_denoise PUBLIC tedi_common)

tedi_add_test(statistical_denoiser_test SOURCES statistical_denoiser_test.cc LIBS tedi_sim_denoise)
tedi_add_test(calibration_test SOURCES calibration_test.cc LIBS tedi_sim_denoise)

add_library(tedi_sim_collect step_collection.cc)
target_include_directories(tedi_sim_collect PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tedi_sim_collect PUBLIC tedi_predictor)
tedi_add_test(step_collection_test SOURCES step_collection_test.cc LIBS tedi_sim_collect tedi_sim_denoise)
