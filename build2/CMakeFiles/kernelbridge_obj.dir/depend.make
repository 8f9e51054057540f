# Empty dependencies file for kernelbridge_obj.
# This may be replaced when dependencies are built.
