file(REMOVE_RECURSE
  "CMakeFiles/test_execution.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_execution.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_execution.dir/tests/test_execution.c.o"
  "CMakeFiles/test_execution.dir/tests/test_execution.c.o.d"
  "test_execution"
  "test_execution.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_execution.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
