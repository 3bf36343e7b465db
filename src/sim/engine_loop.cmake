# Engine-in-the-loop denoising model (DESIGN.md section 4 (a)) and the simulator's plots.
add_library(tedi_sim_engine engine_denoiser.cc)
target_include_directories(tedi_sim_engine PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tedi_sim_engine PUBLIC tedi_engine PRIVATE nlohmann_json::nlohmann_json)
tedi_add_test(engine_denoiser_test SOURCES engine_denoiser_test.cc LIBS tedi_sim_engine)

add_library(tedi_sim_plots plots.cc)
target_include_directories(tedi_sim_plots PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tedi_sim_plots PUBLIC tedi_common)
tedi_add_test(plots_test SOURCES plots_test.cc LIBS tedi_sim_plots)
