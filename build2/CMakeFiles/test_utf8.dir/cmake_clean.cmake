file(REMOVE_RECURSE
  "CMakeFiles/test_utf8.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_utf8.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_utf8.dir/tests/test_utf8.c.o"
  "CMakeFiles/test_utf8.dir/tests/test_utf8.c.o.d"
  "test_utf8"
  "test_utf8.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_utf8.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
