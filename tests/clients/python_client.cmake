# The Python client (clients/python) and its notebook-style example against a real
# coordinator and two CPU workers training with llamafleet-train. Needs the targets
# llamafleet_python, llamafleet-coordinator, llamafleet-worker and llamafleet-train built.
if(TARGET llamafleet_python AND LLAMAFLEET_BUILD_TRAINER)
  add_test(NAME python_client_test
    COMMAND ${LLAMAFLEET_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/python_client_test.py
            ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${LLAMAFLEET_PYTHON_DIR} ${PROJECT_SOURCE_DIR})
  # Trainer rendezvous ports, as the other tests that run gangs.
  set_tests_properties(python_client_test PROPERTIES TIMEOUT 600
    RESOURCE_LOCK llamafleet_trainer_ports ENVIRONMENT "OMP_NUM_THREADS=1")
endif()
# The client without processes (about a second): job states as names that compare equal
# to their numbers (against a fake JobService), samples and DPO rewards as records, every
# method documented, a clear ImportError without grpcio. Needs only the package built.
if(TARGET llamafleet_python)
  add_test(NAME python_client_unit_test
    COMMAND ${LLAMAFLEET_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/python_client_unit_test.py
            ${LLAMAFLEET_PYTHON_DIR} ${PROJECT_SOURCE_DIR})
endif()
