file(REMOVE_RECURSE
  "CMakeFiles/test_wire.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_wire.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_wire.dir/tests/test_wire.c.o"
  "CMakeFiles/test_wire.dir/tests/test_wire.c.o.d"
  "test_wire"
  "test_wire.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_wire.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
