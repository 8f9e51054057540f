file(REMOVE_RECURSE
  "CMakeFiles/test_kernel_user.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_kernel_user.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_kernel_user.dir/tests/test_kernel_user.c.o"
  "CMakeFiles/test_kernel_user.dir/tests/test_kernel_user.c.o.d"
  "test_kernel_user"
  "test_kernel_user.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_kernel_user.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
