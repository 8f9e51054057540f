/*  kernelbridge.h - umbrella header of libkernelbridge. */
#ifndef KERNELBRIDGE_H_INCLUDED
#define KERNELBRIDGE_H_INCLUDED

#include "kernelbridge/kb_error.h"
#include "kernelbridge/kb_export.h"
#include "kernelbridge/kb_result.h"
#include "kernelbridge/kb_service.h"

#endif
