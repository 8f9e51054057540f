file(REMOVE_RECURSE
  "CMakeFiles/test_buf.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_buf.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_buf.dir/tests/test_buf.c.o"
  "CMakeFiles/test_buf.dir/tests/test_buf.c.o.d"
  "test_buf"
  "test_buf.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_buf.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
