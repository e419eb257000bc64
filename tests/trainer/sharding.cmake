# Sharding engine tests (issue 4). sharded_rank is one rank of a deterministic tiny
# training run; sharded_engine_test starts several of them with real Gloo process groups.
if(TARGET llamafleet_trainer_sharding)
  add_executable(sharded_rank sharded_rank_main.cc)
  target_link_libraries(sharded_rank PRIVATE llamafleet_trainer_sharding CLI11::CLI11)
  target_compile_options(sharded_rank PRIVATE ${LLAMAFLEET_WARNINGS})

  # Activation checkpointing cases in it: ActivationCheckpointingMatchesSingleProcess (full,
  # selective and none against LocalEngine, ~25 s), CheckpointingModesGiveTheSameWeights
  # (none/full/selective at 1 and 2 ranks, within 1e-6, ~30 s) and
  # CheckpointedBackwardGathersTheNextLayerBeforeRecomputing (the engine's event log shows
  # layer j-1's gather issued before layer j recomputes, ~12 s), on this 2-core machine.
  llamafleet_add_test(sharded_engine_test SOURCES sharded_engine_test.cc
    LIBS llamafleet_trainer_sharding)
  add_dependencies(sharded_engine_test sharded_rank)
  set_tests_properties(sharded_engine_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# The throughput benchmark tests/gpu/run.sh runs on a GPU (built and smoke-run on the CPU
# here with a tiny preset). Not a ctest test.
if(TARGET llamafleet_trainer_sharding)
  add_executable(trainer_gpu_bench ${PROJECT_SOURCE_DIR}/tests/bench/trainer_gpu_bench.cc)
  target_link_libraries(trainer_gpu_bench PRIVATE llamafleet_trainer_sharding CLI11::CLI11)
  target_compile_options(trainer_gpu_bench PRIVATE ${LLAMAFLEET_WARNINGS})
endif()

find_program(LLAMAFLEET_SYSTEM_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_sharded_train_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_sharded_train.py
            ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_sharded_train_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# World-size invariance with training.global_batch_size (issue 14): 1-4 ranks and resizes.
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_world_size_invariance_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_world_size_invariance.py
            ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_world_size_invariance_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# The memory-fit estimate against the trainer's measured CPU peak (issue 14).
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_memory_calibration_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_memory_calibration.py
            ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_memory_calibration_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# LoRA against the PEFT-convention reference (lora_reference.py): strategies, resume, shrink;
# QLoRA (lora_reference.py --qlora, an NF4 base) on FULL_SHARD and NO_SHARD, resume and shrink
# (about 40 s of the test on a 2-core machine).
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_lora_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_lora.py ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_lora_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# Tensor parallelism (x every strategy, LoRA, QLoRA at T=2 (about 15 s), resliced resume)
# against reference.py.
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_tensor_parallel_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_tensor_parallel.py ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_tensor_parallel_test PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# Evaluation every N steps, early stopping and export best against reference.py's eval.
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_early_stopping_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_early_stopping.py ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_early_stopping_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# kind evaluate (9 llamafleet-train starts: about 20 s idle, 65 s at load 10): two eval sets
# scored on 1 and 2 Gloo ranks (FULL_SHARD, NO_SHARD) equal `llamafleet-train eval` per set and reference.py; an
# adapter scores as the merged model its LoRA run exported; no checkpoint, no export; a
# training-only field refused by name.
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_evaluate_job_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_evaluate_job.py ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_evaluate_job_test PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# Mixtures and named eval sets: a 2-source mixture's rows, losses and weights against
# reference.py trained on the rows mixture_sampler.h defines (recomputed in Python), each
# eval set's loss against reference.py's eval, 1 and 2 ranks. About 20 s.
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_mixtures_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_mixtures.py ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_mixtures_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# Model families (Llama 2/3.1/3.2, Mistral, Qwen2.5) against HF transformers' fixtures
# (fixtures/families) and reference.py: eval in both config layouts, export round trip,
# 2-rank FULL_SHARD (Llama 3.1, 3.2, Mistral, Qwen2.5) and tensor-parallel training, LoRA
# on the same four (Qwen2.5 with biases and tied, Llama 3.2 tied) with the exported adapter
# reloaded by lora_reference.py. About 2 minutes on this 2-core machine under a load
# average of 7 (the LoRA case 33 s).
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_families_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_families.py ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_families_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# Packing with document masking against reference.py, which runs each record of a packed
# row alone: 2 ranks FULL_SHARD with and without activation checkpointing, SHARD_GRAD_OP
# with selective checkpointing, NO_SHARD and tensor parallelism 2 (losses and weights
# within 1e-5), and padded vs packed training of the same records (same weights).
# About 40 s on this 2-core machine (7 two-rank runs of a tiny model).
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_document_packing_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_document_packing.py
            ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_document_packing_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# DPO (training.objective: dpo) against dpo_reference.py: loss, TRL rewards and adapter
# after 4 steps on 1 and 2 ranks (FULL_SHARD) and with tensor parallelism 2 within 1e-5,
# the reference being the base with the adapter off; a run resumed from its step-2
# checkpoint on 2 ranks and shrunk to 1 equals the uninterrupted one; bad preference lines
# and specs. About 80 s on this 2-core machine under load (the tensor-parallel and resume
# cases 32 s of it).
if(TARGET llamafleet_trainer_sharding AND LLAMAFLEET_SYSTEM_PYTHON3)
  add_test(NAME trainer_dpo_test
    COMMAND ${LLAMAFLEET_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_dpo.py ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(trainer_dpo_test PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()
