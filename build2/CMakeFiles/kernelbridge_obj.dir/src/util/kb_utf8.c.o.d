CMakeFiles/kernelbridge_obj.dir/src/util/kb_utf8.c.o: \
 /work/main/src/util/kb_utf8.c /usr/include/stdc-predef.h \
 /work/main/src/util/kb_utf8.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stdbool.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h
