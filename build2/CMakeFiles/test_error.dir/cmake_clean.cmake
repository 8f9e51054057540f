file(REMOVE_RECURSE
  "CMakeFiles/test_error.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_error.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_error.dir/tests/test_error.c.o"
  "CMakeFiles/test_error.dir/tests/test_error.c.o.d"
  "test_error"
  "test_error.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_error.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
