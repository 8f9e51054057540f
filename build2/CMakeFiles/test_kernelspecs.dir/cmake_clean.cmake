file(REMOVE_RECURSE
  "CMakeFiles/test_kernelspecs.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_kernelspecs.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_kernelspecs.dir/tests/test_kernelspecs.c.o"
  "CMakeFiles/test_kernelspecs.dir/tests/test_kernelspecs.c.o.d"
  "test_kernelspecs"
  "test_kernelspecs.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_kernelspecs.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
