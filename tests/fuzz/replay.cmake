# The fuzz harnesses (tests/fuzz) built by the main build as plain programs (replay_main.cc)
# that run every kept input once: ctest fuzz_replay_<harness> replays the seeds
# (corpus/<harness>) and the inputs of past findings (regressions/<harness>) on every
# test run, with or without clang. tests/fuzz/run.sh is what fuzzes them.
find_package(nlohmann_json 3 REQUIRED)
find_package(Boost 1.74 REQUIRED)

function(llamafleet_fuzz_replay name)
  set(dir ${PROJECT_SOURCE_DIR}/tests/fuzz)
  add_executable(fuzz_replay_${name} ${dir}/${name}.cc ${dir}/replay_main.cc)
  target_link_libraries(fuzz_replay_${name} PRIVATE ${ARGN})
  set(inputs ${dir}/corpus/${name})
  if(IS_DIRECTORY ${dir}/regressions/${name})
    list(APPEND inputs ${dir}/regressions/${name})
  endif()
  add_test(NAME fuzz_replay_${name} COMMAND fuzz_replay_${name} ${inputs})
endfunction()

llamafleet_fuzz_replay(jobspec_yaml llamafleet_http llamafleet_jobspec nlohmann_json::nlohmann_json)
llamafleet_fuzz_replay(jobspec_json llamafleet_http llamafleet_jobspec)
llamafleet_fuzz_replay(sweep_expansion llamafleet_jobspec yaml-cpp)
llamafleet_fuzz_replay(http_target llamafleet_http)
llamafleet_fuzz_replay(cli_table llamafleet_cli)
llamafleet_fuzz_replay(trainer_events llamafleet_trainer_events)
llamafleet_fuzz_replay(gpu_health llamafleet_worker)
if(LLAMAFLEET_BUILD_TRAINER)
  foreach(name safetensors_header safetensors_index hf_config checkpoint_manifest peft_adapter_config
                token_file model_file_memory tokenizer_json tiktoken_ranks gguf_file)
    llamafleet_fuzz_replay(${name} llamafleet_trainer_core)
  endforeach()
  llamafleet_fuzz_replay(tokenizer_vocab llamafleet_trainer_core llamafleet_server)
endif()
