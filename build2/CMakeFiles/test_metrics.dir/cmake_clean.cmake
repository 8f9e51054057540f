file(REMOVE_RECURSE
  "CMakeFiles/test_metrics.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_metrics.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_metrics.dir/tests/test_metrics.c.o"
  "CMakeFiles/test_metrics.dir/tests/test_metrics.c.o.d"
  "test_metrics"
  "test_metrics.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_metrics.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
