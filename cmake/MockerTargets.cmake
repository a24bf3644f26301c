# Project-wide helper targets: warnings and sanitizers are INTERFACE targets linked PRIVATE to our
# own targets only, never through CMAKE_CXX_FLAGS, so third-party headers are not affected.

add_library(mocker_warnings INTERFACE)
target_compile_options(mocker_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
  -Wnon-virtual-dtor -Woverloaded-virtual -Wimplicit-fallthrough
  # g++ 12 warns about members omitted from designated initialisers, which is exactly how
  # the house style builds configs (EngineConfig{.num_gpu_blocks = 64}); their defaults apply.
  -Wno-missing-field-initializers
  $<$<CXX_COMPILER_ID:GNU>:-Wduplicated-cond>
  $<$<BOOL:${MOCKER_WERROR}>:-Werror>)

add_library(mocker_sanitizers INTERFACE)
if(MOCKER_SANITIZE)
  # -fno-sanitize-recover=all: a UBSan finding aborts, so it fails its test.
  # g++ 12 with -fsanitize at -O1 and above reports -Wmaybe-uninitialized inside libstdc++
  # (std::variant / std::vector moves) that the same code without instrumentation does not: the
  # instrumentation hides the initialisation from the warning's flow analysis (a known class of
  # g++ false positives under sanitizers). The plain build keeps the warning; Debug (-O0) does not
  # run that analysis at all.
  target_compile_options(mocker_sanitizers INTERFACE -fsanitize=${MOCKER_SANITIZE}
                         -fno-omit-frame-pointer -fno-sanitize-recover=all
                         $<$<AND:$<CXX_COMPILER_ID:GNU>,$<NOT:$<CONFIG:Debug>>>:-Wno-maybe-uninitialized>)
  target_link_options(mocker_sanitizers INTERFACE -fsanitize=${MOCKER_SANITIZE})
  # g++ 12 warns (-Wtsan) wherever Boost.Asio's fenced blocks call std::atomic_thread_fence, which
  # TSan does not model. The gateway (the only Asio user) hands work between its two threads
  # through Asio's mutex-protected queues, so the fences add nothing TSan needs to see; without
  # this, -Werror stops the TSan build at the first gateway source.
  if(MOCKER_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(mocker_sanitizers INTERFACE -Wno-tsan)
  endif()
endif()

# mocker_configure_target(<target>): warnings + sanitizers for one of our own targets.
function(mocker_configure_target target)
  target_link_libraries(${target} PRIVATE mocker_warnings mocker_sanitizers)
endfunction()

# mocker_add_test(<name> SOURCES ... LIBS ...): one GoogleTest binary per module, every case
# discovered by ctest and labelled with the binary's name (`ctest -L '^service_tests$'`; the TSan
# stage of `scripts/dev test` selects its suites this way).
function(mocker_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gmock GTest::gtest_main)
  mocker_configure_target(${name})
  # The test bodies need no -O3: the code under test is in the libraries, which keep the build's
  # optimisation. At -O1 a test source compiles in about two thirds of the time (measured on
  # cli_test.cpp: 28.9 s at -O3, 19.2 s at -O1), and CI compiles every test four times.
  target_compile_options(${name} PRIVATE $<$<CONFIG:Release>:-O1>)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "MOCKER_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
                                  LABELS ${name})
endfunction()
