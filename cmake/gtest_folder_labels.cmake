# Discovers the tests of a GoogleTest binary at ctest time and labels each one by the folder of the source
# file that defines it: a test in tests/unit/ is `unit`, one in tests/integration/ is `integration`. The
# binary lists its tests with their files (--gtest_list_tests --gtest_output=json), so no list of suites is
# kept by hand, and a test outside those folders fails the discovery instead of going unlabelled.
# Integration tests that need more than this machine take the label of what they need, from their suite's
# name: *GpuTest (a real NVIDIA GPU), *SlurmTest (root, a one-node Slurm cluster), *PackageTest (root, the
# Debian mirror); those names are refused outside tests/integration.
#
# Included by ctest (the directory's TEST_INCLUDE_FILES), with
#   GTEST_LABELS_EXECUTABLE  the test binary
#   GTEST_LABELS_CTEST_FILE  where the add_test() lines are cached (made again when the binary is newer)
#   GTEST_LABELS_WORKING_DIR the tests' working directory
#   GTEST_LABELS_TIMEOUTS    label=seconds for unit, integration, gpu, slurm and package

function(gtest_folder_labels_generate)
  set(exe "${GTEST_LABELS_EXECUTABLE}")
  if(NOT EXISTS "${exe}")
    message(FATAL_ERROR "test binary ${exe} is missing: build it first "
                        "(cmake --build . --target gpumeter_tests)")
  endif()
  set(json_file "${GTEST_LABELS_CTEST_FILE}.json")
  execute_process(COMMAND "${exe}" --gtest_list_tests "--gtest_output=json:${json_file}"
                  WORKING_DIRECTORY "${GTEST_LABELS_WORKING_DIR}" TIMEOUT 60
                  OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT EXISTS "${json_file}")
    message(FATAL_ERROR "listing the tests of ${exe} failed (${rc}):\n${out}")
  endif()
  file(READ "${json_file}" listing)
  file(REMOVE "${json_file}")

  set(script "")
  string(JSON n_suites LENGTH "${listing}" testsuites)
  if(n_suites EQUAL 0)
    message(FATAL_ERROR "${exe} lists no tests")
  endif()
  math(EXPR last_suite "${n_suites} - 1")
  foreach(i RANGE ${last_suite})
    string(JSON suite_json GET "${listing}" testsuites ${i})
    string(JSON suite GET "${suite_json}" name)
    string(JSON n_tests LENGTH "${suite_json}" testsuite)
    math(EXPR last_test "${n_tests} - 1")
    foreach(j RANGE ${last_test})
      string(JSON test_json GET "${suite_json}" testsuite ${j})
      string(JSON test GET "${test_json}" name)
      string(JSON file GET "${test_json}" file)
      # The name ctest shows, as gtest_discover_tests writes it: Suite.Test, typed tests as
      # Suite.Test<Type>, value-parameterized ones as Prefix/Suite.Test/value.
      string(JSON type_param ERROR_VARIABLE no_type GET "${test_json}" type_param)
      string(JSON value_param ERROR_VARIABLE no_value GET "${test_json}" value_param)
      if(NOT no_type)
        string(REGEX REPLACE "/.*" "" pretty_suite "${suite}")
        set(name "${pretty_suite}.${test}<${type_param}>")
      elseif(NOT no_value)
        string(REGEX REPLACE "/[0-9]+$" "" base "${test}")
        set(name "${suite}.${base}/${value_param}")
      else()
        set(name "${suite}.${test}")
      endif()
      string(REGEX REPLACE "(^|/)DISABLED_" "\\1" name "${name}")
      # The label is the folder under tests/ of the file that defines the test.
      if(NOT file MATCHES "(^|/)tests/([a-z_]+)/[^/]+$")
        message(FATAL_ERROR "${suite}.${test} is defined in ${file}, not in tests/unit or tests/integration")
      endif()
      set(label "${CMAKE_MATCH_2}")
      if(NOT label STREQUAL "unit" AND NOT label STREQUAL "integration")
        message(FATAL_ERROR "${suite}.${test} is defined in ${file}, not in tests/unit or tests/integration")
      endif()
      if(suite MATCHES "(Gpu|Slurm|Package)Test$")
        string(TOLOWER "${CMAKE_MATCH_1}" need)
        if(NOT label STREQUAL "integration")
          message(FATAL_ERROR "${suite} (in ${file}) needs a ${need} environment: "
                              "it belongs in tests/integration")
        endif()
        set(label "${need}")
      endif()
      set(timeout "")
      foreach(pair IN LISTS GTEST_LABELS_TIMEOUTS)
        if(pair MATCHES "^${label}=([0-9]+)$")
          set(timeout "${CMAKE_MATCH_1}")
        endif()
      endforeach()
      string(APPEND script
        "add_test([==[${name}]==] [==[${exe}]==] [==[--gtest_filter=${suite}.${test}]==] "
        "--gtest_also_run_disabled_tests)\n"
        "set_tests_properties([==[${name}]==] PROPERTIES LABELS ${label} TIMEOUT ${timeout} "
        "WORKING_DIRECTORY [==[${GTEST_LABELS_WORKING_DIR}]==] "
        "SKIP_REGULAR_EXPRESSION [==[\\[  SKIPPED \\]]==])\n")
      if(suite MATCHES "^DISABLED_|/DISABLED_" OR test MATCHES "^DISABLED_")
        string(APPEND script "set_tests_properties([==[${name}]==] PROPERTIES DISABLED TRUE)\n")
      endif()
    endforeach()
  endforeach()
  file(WRITE "${GTEST_LABELS_CTEST_FILE}" "${script}")
endfunction()

if(NOT EXISTS "${GTEST_LABELS_CTEST_FILE}"
   OR "${GTEST_LABELS_EXECUTABLE}" IS_NEWER_THAN "${GTEST_LABELS_CTEST_FILE}"
   OR "${CMAKE_CURRENT_LIST_FILE}" IS_NEWER_THAN "${GTEST_LABELS_CTEST_FILE}")
  gtest_folder_labels_generate()
endif()
include("${GTEST_LABELS_CTEST_FILE}")
