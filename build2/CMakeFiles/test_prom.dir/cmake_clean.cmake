file(REMOVE_RECURSE
  "CMakeFiles/test_prom.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_prom.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_prom.dir/tests/test_prom.c.o"
  "CMakeFiles/test_prom.dir/tests/test_prom.c.o.d"
  "test_prom"
  "test_prom.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_prom.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
