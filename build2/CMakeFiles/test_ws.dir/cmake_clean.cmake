file(REMOVE_RECURSE
  "CMakeFiles/test_ws.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_ws.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_ws.dir/tests/test_ws.c.o"
  "CMakeFiles/test_ws.dir/tests/test_ws.c.o.d"
  "test_ws"
  "test_ws.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_ws.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
