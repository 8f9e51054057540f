
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/cli/kb_cli_client.c" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_client.c.o" "gcc" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_client.c.o.d"
  "/work/main/src/cli/kb_cli_http.c" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_http.c.o" "gcc" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_http.c.o.d"
  "/work/main/src/cli/kb_cli_run.c" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_run.c.o" "gcc" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_run.c.o.d"
  "/work/main/src/cli/kb_cli_serve.c" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve.c.o" "gcc" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve.c.o.d"
  "/work/main/src/cli/kb_cli_serve_flags.c" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve_flags.c.o" "gcc" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve_flags.c.o.d"
  "/work/main/src/cli/kb_cli_serve_values.c" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve_values.c.o" "gcc" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve_values.c.o.d"
  "/work/main/src/cli/kb_main.c" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_main.c.o" "gcc" "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_main.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build2/CMakeFiles/kernelbridge_static.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
