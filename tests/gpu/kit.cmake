# The libraries of tests/gpu/kit.sh's folder (LLAMAFLEET_GPU_KIT) as the targets the
# trainer's CMake files link: absl::*, CLI11::CLI11, nlohmann_json::nlohmann_json,
# OpenSSL::Crypto, protobuf::libprotobuf, PkgConfig::PCRE2, PkgConfig::UTF8PROC, and
# llamafleet_tensorboard_proto from the kit's generated event.pb.cc. Nothing is looked up on
# the system: a header or archive missing from the kit fails the build instead of being found
# elsewhere.
if(NOT EXISTS "${LLAMAFLEET_GPU_KIT}/MANIFEST")
  message(FATAL_ERROR "LLAMAFLEET_GPU_KIT=${LLAMAFLEET_GPU_KIT} is not a kit (no MANIFEST): "
                      "make one with tests/gpu/kit.sh")
endif()
set(_kit_include "${LLAMAFLEET_GPU_KIT}/include")
foreach(lib absl protobuf crypto pcre2-8 utf8proc)
  if(NOT EXISTS "${LLAMAFLEET_GPU_KIT}/lib/lib${lib}.a")
    message(FATAL_ERROR "the kit ${LLAMAFLEET_GPU_KIT} lacks lib/lib${lib}.a: remake it with tests/gpu/kit.sh")
  endif()
endforeach()

# The kit's archives are linked with their symbols hidden (--exclude-libs): a program must
# not export its own libcrypto or protobuf to shared libraries that load the system's copy
# of another version (Debian's LibTorch pulls in libssl.so.3; interposed, OpenSSL crashes).
set(_kit_hidden "LINKER:--exclude-libs,libabsl.a:libprotobuf.a:libcrypto.a:libpcre2-8.a:libutf8proc.a")
add_library(llamafleet_kit_absl STATIC IMPORTED)
set_target_properties(llamafleet_kit_absl PROPERTIES
  IMPORTED_LOCATION "${LLAMAFLEET_GPU_KIT}/lib/libabsl.a"
  INTERFACE_INCLUDE_DIRECTORIES "${_kit_include}"
  INTERFACE_LINK_LIBRARIES Threads::Threads
  INTERFACE_LINK_OPTIONS "${_kit_hidden}")
# Every absl target the trainer's folders name (one merged archive serves them all).
foreach(name base status statusor strings str_format time synchronization flat_hash_map
             flat_hash_set hash optional span cord random_random log_severity)
  add_library(absl::${name} INTERFACE IMPORTED)
  set_target_properties(absl::${name} PROPERTIES INTERFACE_LINK_LIBRARIES llamafleet_kit_absl)
endforeach()

foreach(t CLI11::CLI11 nlohmann_json::nlohmann_json)
  add_library(${t} INTERFACE IMPORTED)
  set_target_properties(${t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_kit_include}")
endforeach()

add_library(OpenSSL::Crypto STATIC IMPORTED)
set_target_properties(OpenSSL::Crypto PROPERTIES
  IMPORTED_LOCATION "${LLAMAFLEET_GPU_KIT}/lib/libcrypto.a"
  INTERFACE_INCLUDE_DIRECTORIES "${_kit_include}"
  INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}"
  INTERFACE_LINK_OPTIONS "${_kit_hidden}")

add_library(PkgConfig::PCRE2 STATIC IMPORTED)
set_target_properties(PkgConfig::PCRE2 PROPERTIES
  IMPORTED_LOCATION "${LLAMAFLEET_GPU_KIT}/lib/libpcre2-8.a"
  INTERFACE_INCLUDE_DIRECTORIES "${_kit_include}"
  INTERFACE_LINK_OPTIONS "${_kit_hidden}")

add_library(PkgConfig::UTF8PROC STATIC IMPORTED)
set_target_properties(PkgConfig::UTF8PROC PROPERTIES
  IMPORTED_LOCATION "${LLAMAFLEET_GPU_KIT}/lib/libutf8proc.a"
  INTERFACE_INCLUDE_DIRECTORIES "${_kit_include}"
  INTERFACE_COMPILE_DEFINITIONS UTF8PROC_STATIC
  INTERFACE_LINK_OPTIONS "${_kit_hidden}")

add_library(protobuf::libprotobuf STATIC IMPORTED)
set_target_properties(protobuf::libprotobuf PROPERTIES
  IMPORTED_LOCATION "${LLAMAFLEET_GPU_KIT}/lib/libprotobuf.a"
  INTERFACE_INCLUDE_DIRECTORIES "${_kit_include}"
  INTERFACE_LINK_LIBRARIES Threads::Threads
  INTERFACE_LINK_OPTIONS "${_kit_hidden}")
add_library(llamafleet_tensorboard_proto STATIC "${LLAMAFLEET_GPU_KIT}/gen/tensorboard/event.pb.cc")
target_include_directories(llamafleet_tensorboard_proto SYSTEM PUBLIC "${LLAMAFLEET_GPU_KIT}/gen")
target_link_libraries(llamafleet_tensorboard_proto PUBLIC protobuf::libprotobuf)
set_target_properties(llamafleet_tensorboard_proto PROPERTIES POSITION_INDEPENDENT_CODE ON)
