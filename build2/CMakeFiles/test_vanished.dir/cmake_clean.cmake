file(REMOVE_RECURSE
  "CMakeFiles/test_vanished.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_vanished.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_vanished.dir/tests/test_vanished.c.o"
  "CMakeFiles/test_vanished.dir/tests/test_vanished.c.o.d"
  "test_vanished"
  "test_vanished.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_vanished.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
