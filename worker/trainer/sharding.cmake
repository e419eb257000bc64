# The FSDP-style sharding engine (issue 4): collectives over c10d, the sharded
# ParamEngine, sharded checkpoints. Compiled into llamafleet_trainer (the training loop in
# train.cc drives the engine); llamafleet_trainer_sharding names the same thing for tests.
#
# GPU builds: when this LibTorch has CUDA, LLAMAFLEET_HAVE_CUDA enables the CUDA allocator
# figures; when nccl.h is also found (NCCL_INCLUDE_DIR, or the nvidia-nccl wheel next to
# torch), NCCL process groups are compiled in (LLAMAFLEET_HAVE_NCCL; USE_C10D_NCCL makes
# ProcessGroupNCCL.hpp declare its class).
if(NOT TARGET OpenSSL::Crypto)
  find_package(OpenSSL REQUIRED)
endif()

target_sources(llamafleet_trainer PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/collectives.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_engine_groups.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_engine_nf4.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_engine_reduce.cc
  ${CMAKE_CURRENT_LIST_DIR}/shard_sources.cc
  ${CMAKE_CURRENT_LIST_DIR}/nf4_base_source.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_checkpoint.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_writer.cc)
target_link_libraries(llamafleet_trainer PRIVATE OpenSSL::Crypto)
add_library(llamafleet_trainer_sharding INTERFACE)
target_link_libraries(llamafleet_trainer_sharding INTERFACE llamafleet_trainer)

set(LLAMAFLEET_TORCH_HAS_CUDA OFF)
if(TORCH_CUDA_LIBRARIES OR CUDA_FOUND OR CUDAToolkit_FOUND)
  set(LLAMAFLEET_TORCH_HAS_CUDA ON)
endif()
if(LLAMAFLEET_TORCH_HAS_CUDA)
  target_compile_definitions(llamafleet_trainer PUBLIC LLAMAFLEET_HAVE_CUDA=1)
  set(_llamafleet_cuda_version "${CUDAToolkit_VERSION}")
  if(NOT _llamafleet_cuda_version)
    set(_llamafleet_cuda_version "${CUDA_VERSION}")
  endif()
  message(STATUS "llamafleet: CUDA LibTorch ${Torch_VERSION} (CUDA ${_llamafleet_cuda_version}): "
                 "LLAMAFLEET_HAVE_CUDA")
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_INCLUDE_DIR} $ENV{NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS}
          ${LLAMAFLEET_NCCL_HINT})
  if(NCCL_INCLUDE_DIR)
    target_include_directories(llamafleet_trainer PRIVATE ${NCCL_INCLUDE_DIR})
    target_compile_definitions(llamafleet_trainer PRIVATE LLAMAFLEET_HAVE_NCCL=1 USE_C10D_NCCL=1)
    message(STATUS "llamafleet: NCCL process groups enabled (nccl.h in ${NCCL_INCLUDE_DIR})")
  else()
    message(WARNING "llamafleet: LibTorch has CUDA but nccl.h was not found: GPU ranks fall back "
                    "to Gloo. Set NCCL_INCLUDE_DIR.")
  endif()
endif()
