
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/tests/kb_testutil.c" "CMakeFiles/test_scan.dir/tests/kb_testutil.c.o" "gcc" "CMakeFiles/test_scan.dir/tests/kb_testutil.c.o.d"
  "/work/main/tests/test_scan.c" "CMakeFiles/test_scan.dir/tests/test_scan.c.o" "gcc" "CMakeFiles/test_scan.dir/tests/test_scan.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build2/CMakeFiles/kernelbridge_static.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
