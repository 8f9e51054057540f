file(REMOVE_RECURSE
  "CMakeFiles/test_kernelspec.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_kernelspec.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_kernelspec.dir/tests/test_kernelspec.c.o"
  "CMakeFiles/test_kernelspec.dir/tests/test_kernelspec.c.o.d"
  "test_kernelspec"
  "test_kernelspec.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_kernelspec.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
