file(REMOVE_RECURSE
  "CMakeFiles/test_scan.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_scan.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_scan.dir/tests/test_scan.c.o"
  "CMakeFiles/test_scan.dir/tests/test_scan.c.o.d"
  "test_scan"
  "test_scan.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_scan.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
