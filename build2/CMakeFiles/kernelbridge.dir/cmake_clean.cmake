file(REMOVE_RECURSE
  "libkernelbridge.pdb"
  "libkernelbridge.so"
  "libkernelbridge.so.0"
  "libkernelbridge.so.0.1.0"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/kernelbridge.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
