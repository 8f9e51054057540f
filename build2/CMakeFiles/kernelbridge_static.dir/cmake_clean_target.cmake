file(REMOVE_RECURSE
  "libkernelbridge_static.a"
)
