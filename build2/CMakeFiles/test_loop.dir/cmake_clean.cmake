file(REMOVE_RECURSE
  "CMakeFiles/test_loop.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_loop.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_loop.dir/tests/test_loop.c.o"
  "CMakeFiles/test_loop.dir/tests/test_loop.c.o.d"
  "test_loop"
  "test_loop.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_loop.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
