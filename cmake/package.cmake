# Debian package (`make package`): CPack's DEB generator over the install rules below. Layout, maintainer
# scripts and the agent's unit: docs/packaging.md. The fake NVML library and the tests are not installed.
include(GNUInstallDirs)

# Man pages and bash/zsh completions generated from the commands' own --help (help2man).
find_program(HELP2MAN_PROGRAM help2man)
set(GPUMETER_PACKAGE_DOCS ${CMAKE_BINARY_DIR}/package-docs)
if(HELP2MAN_PROGRAM AND Python3_FOUND)
  add_custom_command(
    OUTPUT ${GPUMETER_PACKAGE_DOCS}/stamp
    COMMAND ${CMAKE_COMMAND} -E rm -rf ${GPUMETER_PACKAGE_DOCS}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/package_docs.py $<TARGET_FILE:gpumeter>
            ${GPUMETER_PACKAGE_DOCS}
    COMMAND ${CMAKE_COMMAND} -E touch ${GPUMETER_PACKAGE_DOCS}/stamp
    DEPENDS gpumeter ${CMAKE_SOURCE_DIR}/scripts/package_docs.py
    COMMENT "Man pages and shell completions from gpumeter's --help")
  add_custom_target(package_docs ALL DEPENDS ${GPUMETER_PACKAGE_DOCS}/stamp)
  install(DIRECTORY ${GPUMETER_PACKAGE_DOCS}/man/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  install(FILES ${GPUMETER_PACKAGE_DOCS}/completions/gpumeter DESTINATION share/bash-completion/completions)
  install(FILES ${GPUMETER_PACKAGE_DOCS}/completions/_gpumeter DESTINATION share/zsh/vendor-completions)
endif()

# Debian's changelog, compressed reproducibly (gzip -9n, as dh_compress does).
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/package-docs-changelog/changelog.gz
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/package-docs-changelog
  COMMAND sh -c "gzip -9n < \"$0\" > \"$1\"" ${CMAKE_SOURCE_DIR}/packaging/debian/changelog
          ${CMAKE_BINARY_DIR}/package-docs-changelog/changelog.gz
  DEPENDS ${CMAKE_SOURCE_DIR}/packaging/debian/changelog VERBATIM)
add_custom_target(package_changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/package-docs-changelog/changelog.gz)

set(GPUMETER_DOC_DIR ${CMAKE_INSTALL_DATADIR}/doc/gpumeter)
install(TARGETS gpumeter RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/gpumeter DESTINATION lib/python3/dist-packages
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
# (deploy/slurm's unit is the from-source one with /usr/local paths: the package has its own and a drop-in.)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/deploy/ DESTINATION ${CMAKE_INSTALL_DATADIR}/gpumeter/deploy
        PATTERN "gpumeter-agent.service" EXCLUDE PATTERN "*.sh" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/agent-slurm.conf DESTINATION ${CMAKE_INSTALL_DATADIR}/gpumeter/deploy/slurm)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/examples/alexnet.pt.trace.json.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/gpumeter/examples)
install(PROGRAMS ${CMAKE_SOURCE_DIR}/deploy/slurm/gpumeter-prolog.sh ${CMAKE_SOURCE_DIR}/deploy/slurm/gpumeter-epilog.sh
        DESTINATION lib/gpumeter)
# Debian 12 keeps units in /lib/systemd/system (the merged-/usr moratorium); absolute paths below are the
# package's own, whatever the install prefix.
install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/gpumeter-agent.service DESTINATION /lib/systemd/system)
# prices update, daily, disabled by default (docs/catalog.md).
install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/gpumeter-prices-update.service
        ${CMAKE_SOURCE_DIR}/deploy/systemd/gpumeter-prices-update.timer DESTINATION /lib/systemd/system)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/config.toml DESTINATION /etc/gpumeter)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/gpumeter-agent.default DESTINATION /etc/default
        RENAME gpumeter-agent)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/slurm/gpumeter-slurm.default DESTINATION /etc/default RENAME gpumeter-slurm)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/copyright DESTINATION ${GPUMETER_DOC_DIR})
install(FILES ${CMAKE_BINARY_DIR}/package-docs-changelog/changelog.gz DESTINATION ${GPUMETER_DOC_DIR})
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/config.md ${CMAKE_SOURCE_DIR}/docs/catalog.md
        ${CMAKE_SOURCE_DIR}/docs/packaging.md DESTINATION ${GPUMETER_DOC_DIR})
install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
        RENAME gpumeter)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gpumeter)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "gpumeter authors <gpumeter@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "what GPU work costs, per second")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "gpumeter samples NVIDIA GPUs through NVML and turns GPU-seconds into dollars
with a real price catalog and billing rules. It meters a training or
inference job (live cost, forecast, budget stop), attributes cost, energy
and carbon to processes, containers, pods and Slurm jobs, exports
Prometheus metrics, explains PyTorch profiler traces in dollars, and plans
memory, time and cost across GPUs and clouds.

The NVIDIA driver's libnvidia-ml.so.1 is loaded at run time; without it
gpumeter says so (gpumeter doctor) and the commands that need no GPU work.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE https://github.com/gpumeter/gpumeter)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3, bash-completion")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "prometheus, slurm-client")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_SOURCE_DIR}/packaging/debian/postinst
    ${CMAKE_SOURCE_DIR}/packaging/debian/prerm ${CMAKE_SOURCE_DIR}/packaging/debian/postrm
    ${CMAKE_SOURCE_DIR}/packaging/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_THREADS 0)
include(CPack)
