# Installation and the Debian package.
#
#   cmake --install build --prefix /usr/local   # bin/mocker, share/doc/mocker/…
#   (cd build && cpack -G DEB)                  # build/mocker_<version>_<arch>.deb, prefix /usr
#
# What is installed: the `mocker` binary, the example configuration and the reference docs under
# share/doc/mocker: the module READMEs renamed by topic, docs/*.md (engine, wire, traces, metrics, failure drills)
# and the Python client (README and the mocker_client package) at their repository paths, so the README's
# links to docs/… and clients/python/… resolve there too. The package's runtime dependencies
# are computed by dpkg-shlibdeps (Debian package dpkg-dev) from the binary's shared libraries.
include(GNUInstallDirs)

install(TARGETS mocker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT mocker)

# Docs: <source> <path under share/doc/mocker>.
set(MOCKER_INSTALLED_DOCS
  README.md                   README.md
  service/README.md           serve.md
  protocol/README.md          protocol.md
  net/README.md               net.md
  engine/README.md            engine.md
  publishers/README.md        publishers.md
  tools/replay/README.md      replay.md
  tools/index/README.md       index.md
  gateway/README.md           gateway.md
  docs/benchmarks.md          benchmarks.md
  deploy/kubernetes/README.md kubernetes.md
  docs/engine.md              docs/engine.md
  docs/wire.md                docs/wire.md
  docs/traces.md              docs/traces.md
  docs/metrics.md             docs/metrics.md
  docs/failure-drills.md      docs/failure-drills.md
  clients/python/README.md    clients/python/README.md
  clients/python/mocker_client/__init__.py clients/python/mocker_client/__init__.py
  clients/python/mocker_client/client.py clients/python/mocker_client/client.py
  clients/python/mocker_client/disaggregated.py clients/python/mocker_client/disaggregated.py
  clients/python/mocker_client/files.py clients/python/mocker_client/files.py
  clients/python/mocker_client/wire.py clients/python/mocker_client/wire.py)
list(LENGTH MOCKER_INSTALLED_DOCS _n)
math(EXPR _last "${_n} - 1")
foreach(_i RANGE 0 ${_last} 2)
  math(EXPR _j "${_i} + 1")
  list(GET MOCKER_INSTALLED_DOCS ${_i} _src)
  list(GET MOCKER_INSTALLED_DOCS ${_j} _dst)
  get_filename_component(_dst_dir "${_dst}" DIRECTORY)
  get_filename_component(_dst_name "${_dst}" NAME)
  install(FILES ${PROJECT_SOURCE_DIR}/${_src} DESTINATION ${CMAKE_INSTALL_DOCDIR}/${_dst_dir}
          RENAME ${_dst_name} COMPONENT mocker)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/docs/mocker.example.toml
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT mocker)

# Only our component goes into packages (third-party CMake packages may add install rules of
# their own).
set(CPACK_COMPONENTS_ALL mocker)
set(CPACK_DEB_COMPONENT_INSTALL OFF)
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};${PROJECT_NAME};mocker;/")

set(CPACK_PACKAGE_NAME mocker)
set(CPACK_PACKAGE_VENDOR "mocker")
set(CPACK_PACKAGE_CONTACT "mocker maintainers <mocker@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "GPU-free stand-in for an LLM inference engine over ZeroMQ")
set(CPACK_PACKAGE_DESCRIPTION
    "mocker schedules, caches and times LLM inference work like vLLM, SGLang or TensorRT-LLM \
without a GPU, publishes KV-cache events and forward-pass metrics, and replays traces.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
include(CPack)
