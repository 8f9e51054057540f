file(REMOVE_RECURSE
  "CMakeFiles/test_kernel.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_kernel.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_kernel.dir/tests/test_kernel.c.o"
  "CMakeFiles/test_kernel.dir/tests/test_kernel.c.o.d"
  "test_kernel"
  "test_kernel.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_kernel.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
