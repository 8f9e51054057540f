file(REMOVE_RECURSE
  "libkernelbridge_static.a"
  "libkernelbridge_static.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/kernelbridge_static.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
