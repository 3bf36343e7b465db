# The fitted statistical denoising model (DESIGN.md section 4 (b)) and its calibrations.
add_library(tedi_sim_denoise
  statistical_denoiser.cc
  calibration.cc
)
target_include_directories(tedi_sim_denoise PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tedi_sim_denoise PUBLIC tedi_common)

# Fits calibrations (from targets or from engine step logs) and benchmarks the model; see
# data/calibrations/README.md. A stand-in until `tediserve` gets a subcommand for it.
add_executable(tedi_denoise_tool denoise_tool.cc)
target_link_libraries(tedi_denoise_tool PRIVATE tedi_sim_denoise CLI11::CLI11)
set_target_properties(tedi_denoise_tool PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})

tedi_add_test(statistical_denoiser_test SOURCES statistical_denoiser_test.cc LIBS tedi_sim_denoise)
tedi_add_test(calibration_test SOURCES calibration_test.cc LIBS tedi_sim_denoise)
