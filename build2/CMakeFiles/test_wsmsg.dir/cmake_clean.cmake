file(REMOVE_RECURSE
  "CMakeFiles/test_wsmsg.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_wsmsg.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_wsmsg.dir/tests/test_wsmsg.c.o"
  "CMakeFiles/test_wsmsg.dir/tests/test_wsmsg.c.o.d"
  "test_wsmsg"
  "test_wsmsg.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_wsmsg.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
