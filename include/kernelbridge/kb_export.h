/*  kb_export.h - KB_EXPORT marks a function of the public API. The library
    is built with -fvisibility=hidden: libkernelbridge.so exports what is
    declared KB_EXPORT in include/kernelbridge and nothing else (a
    definition takes its visibility from this declaration). */
#ifndef KB_EXPORT_H_INCLUDED
#define KB_EXPORT_H_INCLUDED

#if defined(__GNUC__) || defined(__clang__)
#define KB_EXPORT __attribute__((visibility("default")))
#else
#define KB_EXPORT
#endif

#endif
