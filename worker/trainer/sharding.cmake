# The FSDP-style sharding engine (issue 4): collectives over c10d, the sharded
# ParamEngine, sharded checkpoints. Included from CMakeLists.txt of this directory.
#
# GPU builds: when this LibTorch has CUDA and nccl.h is found (NCCL_INCLUDE_DIR, or the
# nvidia-nccl wheel next to torch), NCCL process groups are compiled in
# (LLAMAFLEET_HAVE_NCCL; USE_C10D_NCCL makes ProcessGroupNCCL.hpp declare its class).
find_package(OpenSSL REQUIRED)

add_library(llamafleet_trainer_sharding STATIC
  collectives.cc
  sharded_engine.cc
  sharded_checkpoint.cc)
target_link_libraries(llamafleet_trainer_sharding
  PUBLIC llamafleet_trainer ${TORCH_LIBRARIES}
  PRIVATE OpenSSL::Crypto)
target_compile_options(llamafleet_trainer_sharding PRIVATE ${LLAMAFLEET_WARNINGS})

set(LLAMAFLEET_TORCH_HAS_CUDA OFF)
if(TORCH_CUDA_LIBRARIES OR CUDA_FOUND OR CUDAToolkit_FOUND)
  set(LLAMAFLEET_TORCH_HAS_CUDA ON)
endif()
if(LLAMAFLEET_TORCH_HAS_CUDA)
  target_compile_definitions(llamafleet_trainer_sharding PUBLIC LLAMAFLEET_HAVE_CUDA=1)
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_INCLUDE_DIR} $ENV{NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS}
          ${LLAMAFLEET_NCCL_HINT})
  if(NCCL_INCLUDE_DIR)
    target_include_directories(llamafleet_trainer_sharding PRIVATE ${NCCL_INCLUDE_DIR})
    target_compile_definitions(llamafleet_trainer_sharding PRIVATE
      LLAMAFLEET_HAVE_NCCL=1 USE_C10D_NCCL=1)
    message(STATUS "llamafleet: NCCL process groups enabled (nccl.h in ${NCCL_INCLUDE_DIR})")
  else()
    message(WARNING "llamafleet: LibTorch has CUDA but nccl.h was not found: GPU ranks fall back "
                    "to Gloo. Set NCCL_INCLUDE_DIR.")
  endif()
endif()
